"""A deleted StreamConsumer's lease table, kept in the ConfigMap `<name>-checkpoints`
(docs/checkpoints.md), and resumed from by the next StreamConsumer of that name and
stream: a GitOps prune and re-apply, a rename back, a restore that skipped status.

The ConfigMap has no owner (it must outlive the object) and carries our label; one of
that name without it is not ours and is left untouched (`owned.NotOurs`)."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from streamconsumer.controller import executors
from streamconsumer.controller.loop import ConsumerLoop
from streamconsumer.controller.names import kept_checkpoints
from streamconsumer.controller.owned import FIELD_MANAGER, KUBERNETES_TIMEOUT_SECONDS, NotOurs
from streamconsumer.models.kept import KeptTable, ownerless
from streamconsumer.models.resource import GROUP, PLURAL, VERSION, Source, StreamConsumerSpec

KEPT_LABEL = f"{GROUP}/checkpoints-of"
TABLE_KEY = "checkpoints.json"
KEPT_ANNOTATION = f"checkpoints.{GROUP}/kept"


def table(
    namespace: str,
    name: str,
    spec: StreamConsumerSpec,
    body: Mapping[str, Any],
    now: datetime.datetime,
    drained: bool,
) -> KeptTable:
    """What to keep of `body` (the object as last written) at `now`."""
    return KeptTable(
        namespace=namespace,
        consumer=name,
        source=spec.source,
        created=datetime.datetime.fromisoformat(body["metadata"]["creationTimestamp"]),
        taken=now,
        expires=now + datetime.timedelta(days=spec.checkpoint_retention.days),
        drained=drained,
        status=ownerless(dict(body.get("status") or {})),
    )


def config_map(kept: KeptTable) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": kept_checkpoints(kept.consumer),
            "labels": {KEPT_LABEL: kept.consumer},
        },
        "data": {TABLE_KEY: kept.model_dump_json(by_alias=True)},
    }


def same_stream(a: Source, b: Source) -> bool:
    """The same stream or table, wherever it is reached from (endpoint) and however it is
    read (polling or fan-out)."""
    ignored = {"endpoint_url", "consumer"}
    return type(a) is type(b) and a.model_dump(
        exclude={kind: ignored for kind in type(a).model_fields}
    ) == b.model_dump(exclude={kind: ignored for kind in type(b).model_fields})


def resumable(
    data: Mapping[str, str] | None, name: str, spec: StreamConsumerSpec, now: datetime.datetime
) -> tuple[KeptTable | None, str]:
    """The kept table a new object `name` may resume from, or None and why not."""
    if data is None or TABLE_KEY not in data:
        return None, "no checkpoints kept"
    try:
        kept = KeptTable.model_validate_json(data[TABLE_KEY])
    except ValidationError as error:
        return None, f"kept checkpoints unreadable ({error.error_count()} errors)"
    if kept.consumer != name:
        return None, f"the kept checkpoints are {kept.consumer}'s"
    if not same_stream(kept.source, spec.source):
        return None, "the kept checkpoints are of another stream"
    if kept.expires < now:
        return None, f"the kept checkpoints expired at {kept.expires.isoformat()}"
    return kept, ""


async def _get(api_client: k8s.ApiClient, namespace: str, name: str) -> Any | None:
    """The kept-checkpoints ConfigMap of consumer `name`, ours or not; None if absent."""
    call = functools.partial(
        k8s.CoreV1Api(api_client).read_namespaced_config_map,
        kept_checkpoints(name),
        namespace,
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
    try:
        return await executors.run_in(executors.KUBERNETES, call)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _ours(found: Any, name: str) -> bool:
    labels = (found.metadata.labels if found.metadata else None) or {}
    return bool(labels.get(KEPT_LABEL) == name)


async def read(api_client: k8s.ApiClient, namespace: str, name: str) -> Mapping[str, str] | None:
    """The data of the consumer's kept-checkpoints ConfigMap, if there is one of ours."""
    found = await _get(api_client, namespace, name)
    return found.data if found is not None and _ours(found, name) else None


async def keep(api_client: k8s.ApiClient, namespace: str, kept: KeptTable) -> None:
    """Writes the table; raises NotOurs where a ConfigMap of that name is not ours."""
    manifest = config_map(kept)
    found = await _get(api_client, namespace, kept.consumer)
    if found is not None and not _ours(found, kept.consumer):
        raise NotOurs("ConfigMap", manifest["metadata"]["name"])
    apply = functools.partial(
        k8s.CoreV1Api(api_client).patch_namespaced_config_map,
        manifest["metadata"]["name"],
        namespace,
        manifest,
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
    await executors.run_in(executors.KUBERNETES, apply)


class Farewell:
    """A deleted consumer's last minute, when its checkpoints are kept: a pause (every
    worker hands its shards off at their checkpoints, as on any planned move) until no
    shard is held and the status holds that, or `seconds` have passed. Pure: the host
    asks `over` on each tick."""

    def __init__(self, loop: ConsumerLoop, seconds: float) -> None:
        self.loop = loop
        self.seconds = seconds
        self.started: float | None = None
        self.drained = False

    def over(self, now: float) -> bool:
        coordinator = self.loop.coordinator
        if self.started is None:
            self.started = now
            coordinator.update_spec(coordinator.spec.model_copy(update={"paused": True}))
            self.loop.pause_asked("the deletion of the StreamConsumer")
        held = any(lease.owner for lease in coordinator.leases.values())
        self.drained = not held and coordinator.persisted_version >= coordinator.version
        return self.drained or now - self.started >= self.seconds


async def mark(api_client: k8s.ApiClient, namespace: str, name: str, where: str) -> None:
    """Notes on the deleted object what became of its checkpoints."""
    patch = {"metadata": {"annotations": {KEPT_ANNOTATION: where}}}
    call = functools.partial(
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        patch,
        _content_type="application/merge-patch+json",
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
    try:
        await executors.run_in(executors.KUBERNETES, call)
    except ApiException as error:
        if error.status != 404:  # gone already: nothing to say it on
            raise
