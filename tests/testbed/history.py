"""Every version of one Kubernetes object, as a watch delivers it, with the time it
arrived: a test can then check a property over the whole run (a checkpoint that went
backwards for one second and came back), not only in the state it ends in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

# How long one watch request lasts before it is renewed (from the last version seen).
_WATCH_SECONDS = 5


@dataclass(frozen=True)
class Version:
    at: float  # time.time() when the watch delivered it
    body: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str(self.body["metadata"]["resourceVersion"])


class History:
    """Watches the object `name` through `list_call(*args)` (a namespaced list of the
    generated client) in a thread, from construction until `stop()`.

    `gaps` counts the times the watch had to start over from a fresh list (its last
    version had expired): versions written in such a gap may be missing."""

    def __init__(self, list_call: Callable[..., Any], name: str, *args: Any) -> None:
        self.name = name
        self._selector = f"metadata.name={name}"
        self.versions: list[Version] = []
        self.gaps = 0
        self._list_call = list_call
        self._args = args
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def snapshot(self) -> list[Version]:
        with self._lock:
            return list(self.versions)

    def stop(self) -> list[Version]:
        self._stopped.set()
        self._watch.stop()  # type: ignore[no-untyped-call]
        self._thread.join(_WATCH_SECONDS + 10)
        return self.snapshot()

    def _list(self) -> str:
        """Notes the object as it is now (if it exists); returns the list's version."""
        response = self._list_call(
            *self._args, field_selector=self._selector, _preload_content=False
        )
        listed = json.loads(response.data)
        for item in listed.get("items", []):
            self._add(Version(time.time(), item))
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        since: str | None = None
        while not self._stopped.is_set():
            try:
                since = since or self._list()
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self._list_call,
                    *self._args,
                    field_selector=self._selector,
                    timeout_seconds=_WATCH_SECONDS,
                    resource_version=since,
                ):
                    body = event["raw_object"]
                    since = body["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._add(Version(time.time(), body))
                    if self._stopped.is_set():
                        break
            except ApiException as error:
                if error.status == 410:  # our version expired: list again
                    since = None
                    self.gaps += 1
                else:
                    time.sleep(0.2)
            except (HTTPError, OSError):
                time.sleep(0.2)

    def _add(self, version: Version) -> None:
        with self._lock:
            # A list after a gap may repeat the version last seen: keep each once.
            if not self.versions or self.versions[-1].resource_version != (
                version.resource_version
            ):
                self.versions.append(version)
