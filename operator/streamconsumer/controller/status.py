"""The status subresource: rendered from the coordinator, written at most about once a
second per consumer, and guarded by resourceVersion so a stale operator replica cannot
overwrite a newer lease table (DESIGN §3.7)."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.children import label_selector
from streamconsumer.controller.state import Coordinator
from streamconsumer.core.leases import ACTIVE, HANDOFF
from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL, VERSION
from streamconsumer.models.resource import Condition, StreamConsumerStatus, WorkerSummary


class StaleState(Exception):
    """Someone else wrote a different lease table: ours is not the latest."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__("status was changed by another writer")
        self.current = current


def _condition(
    previous: dict[str, Condition],
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int | None,
) -> Condition:
    status = "True" if ok else "False"
    before = previous.get(type_)
    since = (
        before.last_transition_time
        if before is not None and before.status == status
        else datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    )
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=since,
    )


def render(
    name: str,
    coordinator: Coordinator,
    generation: int | None,
    previous: list[Condition],
    source_error: str | None,
) -> StreamConsumerStatus:
    leases = coordinator.status_leases()
    ready = coordinator.assignable()
    owned = sum(
        1 for sid in ready if sid in coordinator.leases and coordinator.leases[sid].state is ACTIVE
    )
    moving = sum(1 for lease in coordinator.leases.values() if lease.state is HANDOFF)
    held = Counter(lease.owner for lease in coordinator.leases.values() if lease.owner)
    workers = {
        worker: WorkerSummary(
            shards=held[worker],
            draining=progress.draining,
        )
        for worker, progress in sorted(coordinator.workers.items())
    }
    lag = coordinator.lag_millis()
    by_type = {c.type: c for c in previous}
    if source_error:
        ready_condition = _condition(
            by_type, "Ready", False, "StreamUnavailable", source_error, generation
        )
    elif not coordinator.shards_known:
        ready_condition = _condition(
            by_type, "Ready", False, "ListingShards", "listing shards", generation
        )
    elif owned < len(ready):
        message = f"{owned}/{len(ready)} assignable shards have an owner"
        reason = "NoWorkers" if not workers else "ShardsUnassigned"
        ready_condition = _condition(by_type, "Ready", False, reason, message, generation)
    else:
        message = f"{owned} shards owned by {len(workers)} workers"
        ready_condition = _condition(by_type, "Ready", True, "AllShardsOwned", message, generation)
    progressing = _condition(
        by_type,
        "Progressing",
        moving > 0,
        "HandingOff" if moving else "Stable",
        f"{moving} shards being handed off" if moving else "",
        generation,
    )
    degraded = _condition(
        by_type,
        "Degraded",
        source_error is not None,
        "StreamUnavailable" if source_error else "AsExpected",
        source_error or "",
        generation,
    )
    return StreamConsumerStatus(
        observed_generation=generation,
        replicas=sum(1 for w in workers.values() if not w.draining),
        desired_replicas=coordinator.desired_replicas,
        label_selector=label_selector(name),
        shards=sum(1 for shard in coordinator.shards if not shard.closed),
        lag_millis=max(lag.values()) if lag else None,
        leases=leases,
        workers=workers,
        conditions=[ready_condition, progressing, degraded],
    )


class StatusWriter:
    def __init__(self, api_client: k8s.ApiClient, namespace: str, name: str) -> None:
        self._api = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.name = name
        self.resource_version: str | None = None
        self.spec: dict[str, Any] = {}
        self.last_written: dict[str, Any] | None = None
        self.writes = 0

    def adopt(self, body: dict[str, Any]) -> None:
        """Starts from the object as read (its status is the durable lease table)."""
        self.resource_version = body["metadata"]["resourceVersion"]
        self.spec = body.get("spec", {})
        self.last_written = body.get("status")

    def write(self, status: dict[str, Any]) -> None:
        """PUTs the status under the resourceVersion we last saw. A conflict caused by
        someone else's spec or metadata change is retried; one caused by a different
        status means we are stale and raises StaleState."""
        for _ in range(3):
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": self.resource_version,
                },
                "spec": self.spec,
                "status": status,
            }
            try:
                written = cast(
                    dict[str, Any],
                    self._api.replace_namespaced_custom_object_status(
                        GROUP, VERSION, self.namespace, PLURAL, self.name, body
                    ),
                )
            except ApiException as error:
                if error.status != 409:
                    raise
                current = cast(
                    dict[str, Any],
                    self._api.get_namespaced_custom_object(
                        GROUP, VERSION, self.namespace, PLURAL, self.name
                    ),
                )
                if (current.get("status") or {}).get("leases") != (self.last_written or {}).get(
                    "leases"
                ):
                    raise StaleState(current) from None
                self.resource_version = current["metadata"]["resourceVersion"]
                self.spec = current.get("spec", {})
                continue
            self.resource_version = written["metadata"]["resourceVersion"]
            self.last_written = written.get("status")
            self.writes += 1
            return
        raise RuntimeError("status write kept conflicting")
