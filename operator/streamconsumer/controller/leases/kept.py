"""A deleted StreamConsumer's lease table, kept in the ConfigMap `<name>-checkpoints`
(docs/checkpoints.md), and resumed from by the next StreamConsumer of that name and
stream: a GitOps prune and re-apply, a rename back, a restore that skipped status.

The ConfigMap has no owner (it must outlive the object) and carries our label; one of
that name without it is not ours and is left untouched (`owned.NotOurs`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller import executors
from streamconsumer.controller.aws.access import AccessPolicy, guarded
from streamconsumer.controller.consumer.loop import ConsumerLoop
from streamconsumer.controller.names import kept_checkpoints
from streamconsumer.controller.workloads.owned import (
    FIELD_MANAGER,
    KUBERNETES_TIMEOUT_SECONDS,
    NotOurs,
)
from streamconsumer.models.kept import KeptTable, config_map, kept_data, kept_for
from streamconsumer.models.resource import GROUP, PLURAL, VERSION, Source
from streamconsumer.sources.factory import make_source

KEPT_ANNOTATION = f"checkpoints.{GROUP}/kept"


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


async def read(api_client: k8s.ApiClient, namespace: str, name: str) -> Mapping[str, str] | None:
    """The data of the consumer's kept-checkpoints ConfigMap, if there is one of ours."""
    found = await _get(api_client, namespace, name)
    if found is None or not kept_for(found.metadata, name):
        return None
    unpacking = functools.partial(kept_data, found.data, found.binary_data)  # CPU: not here
    return await executors.run_in(executors.TABLES, unpacking)


class NoLongerLeading(Exception):
    """The term ended before the table was written: the leader keeps it."""


async def keep(
    api_client: k8s.ApiClient, namespace: str, kept: KeptTable, leading: Callable[[], bool]
) -> None:
    """Writes the table; raises NotOurs where a ConfigMap of that name is not ours, and
    NoLongerLeading where this replica's term ended first."""
    manifest = config_map(kept, kept_checkpoints(kept.consumer))
    found = await _get(api_client, namespace, kept.consumer)
    if found is not None and not kept_for(found.metadata, kept.consumer):
        raise NotOurs("ConfigMap", manifest["metadata"]["name"])
    # After the last await: a replica frozen before here and resumed after a takeover
    # would force its older table over the one the new leader kept since.
    if not leading():
        raise NoLongerLeading(f"not kept here: the term ended ({kept.consumer})")
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


async def incarnation(
    policy: AccessPolicy, namespace: str, source: Source, within_seconds: float
) -> str | None:
    """The incarnation of the stream `source` names (`StreamSource.incarnation`), read as
    the namespace may (its access policy and identity); raises what AWS or the policy
    raised, or TimeoutError after `within_seconds` (its thread then ends by itself)."""

    def described() -> str | None:  # the client made in the thread too: it takes time
        return guarded(policy, namespace, make_source)(source).incarnation()

    return await asyncio.wait_for(executors.run_in(executors.STREAMS, described), within_seconds)


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
