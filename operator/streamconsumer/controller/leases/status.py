"""The status subresource, written at most about once a second per consumer and guarded
by resourceVersion, so a stale operator replica cannot overwrite a newer lease table
(docs/design.md#cheap-on-the-apiserver). What it holds is rendered by `render`.

The writer talks to the apiserver through a two-call port (`StatusApi`), so the same
conflict logic runs against Kubernetes (`kube_status.KubeStatusApi`) and in the
simulator."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from streamconsumer.models import API_VERSION, KIND
from streamconsumer.models.resource import Term


def term_of(status: dict[str, Any] | None) -> Term | None:
    term = (status or {}).get("term")
    return Term.model_validate(term) if term else None


# --- writing --------------------------------------------------------------------------


class Conflict(Exception):
    """409: the object changed since the resourceVersion we sent."""


class StatusInvalid(Exception):
    """400/422: the apiserver refuses this status (a schema violation, an oversize)."""


class StatusUnavailable(Exception):
    """5xx, throttling, a timeout or a broken connection: the write may or may not
    have landed."""


# What a read or write of the status raises when the apiserver refused it or did not
# answer: callers that cannot do more than say so and try later catch these.
STATUS_ERRORS = (StatusInvalid, StatusUnavailable)


class Deposed(Exception):
    """A newer term fenced the status: this writer must never write again."""


class StaleState(Exception):
    """Someone else wrote a different lease table: ours is not the latest."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__("status was changed by another writer")
        self.current = current


class StatusApi(Protocol):
    def get(self) -> dict[str, Any]:
        """The StreamConsumer as stored."""
        ...

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """Replaces the status of `body` if the object is still at its resourceVersion;
        raises Conflict, StatusInvalid, StatusUnavailable."""
        ...


@dataclass
class Attempt:
    """One status write, prepared when its job starts: the resourceVersion it is
    conditional on is the one seen then, not when its thread gets round to it."""

    number: int
    status: dict[str, Any]
    resource_version: str | None


class Superseded(Exception):
    """A newer write was started: this one, abandoned by its caller, must not re-send."""


class StatusWriter:
    """Writes under the resourceVersion last seen, fenced by a term
    (docs/design.md#term-fence): its first write that lands raises the status' term
    number to one past what it read. A conflict is resolved by reading the object back:
    under our own term the table is ours (retry); under another term it is an older
    term's late write before our fence (StaleState: adopt it, fence again) or a newer
    term after it (Deposed: never write again). Only the newest attempt ever retries, so
    an abandoned one can never put an older table back. Attempts run on threads that may
    outlive their job's timeout: shared state is touched under a lock."""

    def __init__(self, api: StatusApi, namespace: str, name: str, holder: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.holder = holder  # unique per process: two lives never share a term
        self.resource_version: str | None = None
        self.spec: dict[str, Any] = {}
        self.last_written: dict[str, Any] | None = None
        self.term: Term | None = None
        self.fenced = False
        self.writes = 0
        self._attempts = 0
        self._lock = threading.Lock()

    def adopt(self, body: dict[str, Any]) -> None:
        """Starts from the object as read (its status is the durable lease table)."""
        with self._lock:
            self._adopt(body)

    def _adopt(self, body: dict[str, Any]) -> None:
        self.resource_version = body["metadata"]["resourceVersion"]
        self.spec = body.get("spec", {})
        self.last_written = body.get("status")
        stored = term_of(self.last_written)
        if stored is not None and stored == self.term:
            self.fenced = True  # our fence landed although its answer was lost
        if not self.fenced:
            self.term = Term(number=stored.number + 1 if stored else 0, holder=self.holder)

    def prepare(self, status: dict[str, Any]) -> Attempt:
        """A write of `status` under our term, conditional on what we saw last."""
        with self._lock:
            assert self.term is not None, "adopt the object before writing"
            self._attempts += 1
            status = {**status, "term": self.term.wire()}
            return Attempt(self._attempts, status, self.resource_version)

    def write(self, status: dict[str, Any]) -> None:
        self.send(self.prepare(status))

    def send(self, attempt: Attempt) -> None:
        for _ in range(3):
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": attempt.resource_version,
                },
                "spec": self.spec,
                "status": attempt.status,
            }
            try:
                written = self.api.replace_status(body)
            except Conflict:
                current = self.api.get()
                with self._lock:
                    attempt.resource_version = self._resolve(attempt, current)
                continue
            with self._lock:
                self.fenced = True  # our term is in the status now
                if attempt.number == self._attempts:
                    self.resource_version = written["metadata"]["resourceVersion"]
                    self.last_written = written.get("status")
                # else: an abandoned attempt landed late; the newest one meets it at its
                # conflict, sees our term, and carries on from there
                self.writes += 1
            return
        raise StatusUnavailable("status write kept conflicting")

    def _resolve(self, attempt: Attempt, current: dict[str, Any]) -> str | None:
        """After a conflict: the resourceVersion to retry under, or raise. Only this
        process writes under its term, so a stored table under it is ours (a spec edit
        moved the resourceVersion, or a write of ours landed unanswered): retry."""
        if attempt.number != self._attempts:
            raise Superseded(f"status write {attempt.number} was superseded")
        stored_term = term_of(current.get("status"))
        if stored_term != self.term:
            if self.fenced:
                raise Deposed(f"term {stored_term} fenced the status")
            if stored_term == term_of(self.last_written) and _table(current) == _table(
                {"status": self.last_written}
            ):
                # Nobody wrote a lease table since we read it (kopf's own metadata patches
                # moved the resourceVersion): ours stands. Adopting the stored one would
                # drop a table we start from on purpose (a new object's kept checkpoints).
                self.resource_version = current["metadata"]["resourceVersion"]
                self.spec = current.get("spec", {})
                return self.resource_version
            raise StaleState(current)  # an older term's write landed before our fence
        self._adopt(current)
        return self.resource_version


def _table(body: dict[str, Any]) -> tuple[Any, Any]:
    """The lease table a stored status holds (what a term's write puts there)."""
    status = body.get("status") or {}
    return status.get("leases") or {}, status.get("finishedShards") or []
