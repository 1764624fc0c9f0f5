"""What runs for one StreamConsumer while this replica leads: load it from the object
(a new term), fence its status, drive it until kopf stops the daemon, the term ends, or
a newer term fences the status (docs/design.md#operator-lifecycle)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors, metrics, names
from streamconsumer.controller.apply import AUTOSCALER, apply
from streamconsumer.controller.aws.access import guarded
from streamconsumer.controller.consumer.driver import STREAM_JOBS, ConsumerDriver, Timeouts, load
from streamconsumer.controller.consumer.jobs import ThreadJobs
from streamconsumer.controller.consumer.loop import ConsumerLoop, Event, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer
from streamconsumer.controller.consumer.runner import run_consumer
from streamconsumer.controller.context import OperatorContext
from streamconsumer.controller.leases import kept
from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.lease_group_store import KubeLeaseGroups
from streamconsumer.controller.leases.lease_groups import GroupedStatusApi
from streamconsumer.controller.leases.state import durable_from_status
from streamconsumer.controller.leases.status import (
    STATUS_ERRORS,
    StatusApi,
    StatusInvalid,
    StatusWriter,
)
from streamconsumer.controller.workloads import children
from streamconsumer.controller.workloads.owned import (
    KUBERNETES_TIMEOUT_SECONDS,
    NotOurs,
    controlled_by,
)
from streamconsumer.models import kept as kept_table
from streamconsumer.models.kept import KeptTable, KeptTableInvalid
from streamconsumer.models.resource import OnDelete, StreamConsumerSpec
from streamconsumer.sources.aws import summary
from streamconsumer.sources.factory import make_source

log = logging.getLogger(__name__)


async def consume(
    context: OperatorContext,
    body: kopf.Body,
    namespace: str,
    name: str,
    stopped: Callable[[], bool],
    deleted: Callable[[], bool],
) -> None:
    config, registry = context.config, context.registry
    registry.loading(namespace, name)
    try:
        groups = KubeLeaseGroups(context.api_client, namespace, name, body.metadata.uid)
        status_api = GroupedStatusApi(
            KubeStatusApi(context.api_client, namespace, name),
            groups,
            name,
            config.lease_layout(),
        )
        # A holder of its own: kopf may start this daemon again in the same process while
        # the last one's writes still run on; they must not pass for this one's.
        holder = f"{context.holder}/{uuid.uuid4().hex[:8]}"
        writer = StatusWriter(status_api, namespace, name, holder=holder)
        settings = LoopSettings(
            shard_sync_seconds=config.shard_sync_seconds,
            status_interval_seconds=config.status_interval_seconds,
        )
        loop, resumed, not_resumed = await _loaded(
            context,
            status_api,
            writer,
            settings,
            lambda: body.get("metadata", {}).get("generation"),
            namespace,
            name,
        )
        consumer = ManagedConsumer(namespace, name, loop, owner=body)
        stream_calls = {kind: executors.STREAM_CALLS for kind in STREAM_JOBS}
        jobs = ThreadJobs(executors.CONSUMERS, consumer.wake, by_kind=stream_calls)
        driver = ConsumerDriver(
            namespace,
            name,
            loop,
            guarded(config.aws_access, namespace, make_source),
            writer,
            jobs,
            time.monotonic,
            functools.partial(_emit, body),
            Timeouts(
                listing=config.shard_sync_timeout_seconds,
                status_write=config.status_write_timeout_seconds,
                scale=KUBERNETES_TIMEOUT_SECONDS,
            ),
            scale=functools.partial(_scale, context.api_client, namespace, name, body.metadata.uid),
            saved=lambda: consumer.notify_persisted(),
            probes=context.probes,
        )
        registry.add(consumer)
        # A spec change handled while the loop loaded found no loop to tell: kopf keeps a
        # daemon's body fresh, so the loop starts from the newest spec, not the one read.
        newest = StreamConsumerSpec.model_validate(body.get("spec") or {})
        if newest != loop.coordinator.spec:
            loop.coordinator.update_spec(newest)
        spec = loop.coordinator.spec
        if resumed is not None:
            _emit(body, Event("Normal", "CheckpointsResumed", _resumed_message(resumed)))
        elif not_resumed:
            afresh = f"starts at its initialPosition ({spec.initial_position}): {not_resumed}"
            _emit(body, Event("Warning", "CheckpointsNotResumed", afresh))
        # A bounded consumer's finished shards are finished only up to its end: a table
        # another consumer resumed from would skip what came after (docs/replaying.md).
        keeping = spec.checkpoint_retention.on_delete is OnDelete.KEEP and spec.end is None
        farewell = kept.Farewell(loop, farewell_seconds(spec))

        def over() -> bool:
            if not context.leading():
                return True  # a replica whose term ended stops at once
            if not stopped():
                return False
            if deleted() and keeping:  # its workers hand off first, then it is kept
                return farewell.over(time.monotonic())
            return True

        await run_consumer(consumer, driver, jobs, over)
        if driver.deposed:
            context.deposed(f"{namespace}/{name}: {driver.loop.deposed}")
        elif deleted() and context.leading():
            where: str | None = (
                "discarded (checkpointRetention.onDelete: Discard)"
                if spec.end is None
                else "discarded (a bounded consumer's: its shards ended at spec.end)"
            )
            if keeping:
                where = await _keep(context, status_api, body, namespace, name, spec, farewell)
            # Said on the object too, once this daemon is over: that change is also what
            # has kopf look at it again and let it go, not after the backoff. Made while
            # the daemon still runs, kopf could look at it first and wait out the backoff.
            # Not by a replica whose term ended meanwhile: the leader says it.
            if where is not None:
                _after_this_daemon(kept.mark(context.api_client, namespace, name, where))
            if where is not None and where != CHECKPOINTS_LOST:  # else the groups are left
                await _drop_groups(groups, namespace, name)
    finally:
        registry.remove(namespace, name)
        if deleted():
            registry.forget(namespace, name)
            metrics.forget(namespace, name)


CHECKPOINTS_LOST = "lost: see the CheckpointsLost Event"
LOADING_SECONDS = 30.0
"""A consumer's table is read and checked off the event loop, on TABLES' threads, in at
most this long from when a thread takes it up: one tenant's table never holds up the
others' for longer than its own check (docs/security.md#lease-tables)."""


class Refused(Exception):
    """This consumer cannot be loaded from what it stores or resumes from: it alone stops
    (Stalled with `reason`) until someone mends it; the daemon tries again now and then."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def _loaded(
    context: OperatorContext,
    status_api: StatusApi,
    writer: StatusWriter,
    settings: LoopSettings,
    generation: Callable[[], int | None],
    namespace: str,
    name: str,
) -> tuple[ConsumerLoop, KeptTable | None, str]:
    """The consumer's loop as its status (and a kept table it resumes from) start it, with
    that table and why none where one was not; raises Refused for a table that is
    invalid or past the bounds, or that takes longer than LOADING_SECONDS to check."""
    try:
        current = await executors.run_in(executors.KUBERNETES, status_api.get)
        resumed, not_resumed = await _resumable(context, current, namespace, name)

        def loading() -> ConsumerLoop:  # its clock read once a thread runs it
            return load(current, writer, settings, time.monotonic(), generation, kept=resumed)

        loop = await executors.run_within(executors.TABLES, loading, LOADING_SECONDS)
    except KeptTableInvalid as error:
        raise Refused("CheckpointsInvalid", f"the kept checkpoints: {error}") from None
    except (ValueError, StatusInvalid) as error:  # TableOutOfBounds, pydantic's among them
        raise Refused("StatusInvalid", f"the lease table: {summary(str(error))}") from None
    except TimeoutError:
        took = f"the lease table took over {LOADING_SECONDS:.0f}s to load"
        raise Refused("LoadTimedOut", took) from None
    return loop, resumed, not_resumed


async def _drop_groups(groups: KubeLeaseGroups, namespace: str, name: str) -> None:
    """A deleted consumer's lease groups, once its table is kept or discarded: they have
    no owner reference for the garbage collector (controller/leases/lease_group_store.py)."""
    try:
        dropped = await executors.run_in(executors.KUBERNETES, groups.drop)
    except STATUS_ERRORS as error:
        log.warning("%s/%s: its lease groups were not all deleted: %s", namespace, name, error)
    else:
        if dropped:
            log.info("%s/%s: its %d lease groups deleted", namespace, name, dropped)


NUDGE_DELAY_SECONDS = 1.0
_nudges: set[asyncio.Task[None]] = set()  # referenced until done (asyncio keeps weak ones)


def _after_this_daemon(call: Coroutine[Any, Any, None]) -> None:
    async def later() -> None:
        await asyncio.sleep(NUDGE_DELAY_SECONDS)
        with contextlib.suppress(ApiException, HTTPError, OSError):
            await call

    task = asyncio.get_running_loop().create_task(later())
    _nudges.add(task)
    task.add_done_callback(_nudges.discard)


FAREWELL_SECONDS = 60.0  # at most: kopf's daemon cancellation timeout must exceed it


STREAM_LOOKUP_SECONDS = 15.0  # describing the stream, before its table is resumed or kept
# How long a deleted consumer's daemon may take at most: the farewell, its stream
# described (again, if it could not be at load), its status read and its table kept.
KEEPING_SECONDS = FAREWELL_SECONDS + 2 * STREAM_LOOKUP_SECONDS + 3 * KUBERNETES_TIMEOUT_SECONDS


def farewell_seconds(spec: StreamConsumerSpec) -> float:
    """Long enough for every worker to finish its batch and release (a lease, twice)."""
    return min(FAREWELL_SECONDS, 2 * spec.leases.duration_seconds)


async def _resumable(
    context: OperatorContext, current: dict[str, Any], namespace: str, name: str
) -> tuple[KeptTable | None, str]:
    """For an object that has never written its status (a new one): the table kept for a
    deleted consumer of this name, or for the one `spec.startFrom` names, if it fits (the
    same stream, not deleted and created again since, not expired); else None, and why
    where a table is there. What `startFrom` names must be there and fit, and a table
    that names its stream is resumed only once the stream is seen to be that one: else
    this raises ResumeRefused (the daemon retries)."""
    if (current.get("status") or {}).get("term") is not None:
        return None, ""
    spec = StreamConsumerSpec.model_validate(current.get("spec") or {})
    source = spec.start_from.checkpoints_of if spec.start_from is not None else name
    data = await kept.read(context.api_client, namespace, source)
    now = datetime.datetime.now(datetime.UTC)
    checking = functools.partial(_checked, data, source, spec, now)
    table, why_not = await executors.run_within(executors.TABLES, checking, LOADING_SECONDS)
    if table is not None and kept_table.kept_stream(table) is not None:
        try:
            now_is = await _stream(context, namespace, spec)
        except Exception as error:  # AWS, the access policy, the timeout: told and retried
            raise ResumeRefused(
                f"the checkpoints kept of {source} name their stream, which could not be "
                f"described to check they are of the one there now: {_said(error)}"
            ) from None
        why_not = kept_table.another_incarnation(table, now_is) if now_is is not None else ""
        table = None if why_not else table
    if table is None and spec.start_from is not None:
        raise ResumeRefused(f"spec.startFrom.checkpointsOf {source}: {why_not}")
    if table is None:
        if data is not None:
            log.warning("%s/%s starts afresh: %s", namespace, name, why_not)
        return None, why_not if data is not None else ""
    log.info("%s/%s resumes from the checkpoints kept at %s", namespace, name, table.taken)
    return table, ""


def _checked(
    data: Mapping[str, str] | None, source: str, spec: StreamConsumerSpec, now: datetime.datetime
) -> tuple[KeptTable | None, str]:
    """`kept_table.resumable`, and the table within the bounds of any lease table."""
    table, why_not = kept_table.resumable(data, source, spec, now)
    if table is not None:
        try:
            durable_from_status(table.status)
        except ValueError as error:  # TableOutOfBounds, pydantic's
            raise KeptTableInvalid(summary(str(error))) from None
    return table, why_not


class ResumeRefused(Exception):
    """Kept checkpoints a new object must resume from cannot be resumed from now."""


def _said(error: BaseException) -> str:
    return summary(f"{type(error).__name__}: {error}")


async def _stream(context: OperatorContext, namespace: str, spec: StreamConsumerSpec) -> str | None:
    """The incarnation of the consumer's stream (`StreamKind.incarnation`)."""
    policy = context.config.aws_access
    return await kept.incarnation(policy, namespace, spec.source, STREAM_LOOKUP_SECONDS)


async def _stream_or_none(
    context: OperatorContext, namespace: str, name: str, spec: StreamConsumerSpec
) -> str | None:
    """The incarnation of the consumer's stream, or None where it cannot be read: its
    table is then kept without it (and resumed without that check)."""
    try:
        return await _stream(context, namespace, spec)
    except Exception as error:  # AWS, the access policy, the timeout: never fatal here
        log.warning("%s/%s: its stream could not be described: %s", namespace, name, _said(error))
        return None


def _resumed_message(table: KeptTable) -> str:
    shards = len(table.status.get("leases") or {})
    how = "after a hand-off" if table.drained else "without a hand-off (some may be replayed)"
    return (
        f"resumed from the checkpoints of {shards} shards kept at {table.taken.isoformat()} {how}"
    )


async def _keep(
    context: OperatorContext,
    status_api: StatusApi,
    body: kopf.Body,
    namespace: str,
    name: str,
    spec: StreamConsumerSpec,
    farewell: kept.Farewell,
) -> str | None:
    """Keeps the lease table as the status last holds it, with the stream it is of (the
    status says, but for a consumer that never listed: the stream as it is now); says
    where (None: not by this replica, whose term ended first)."""
    try:
        last = await executors.run_in(executors.KUBERNETES, status_api.get)
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        said = (last.get("status") or {}).get(kept_table.STREAM) is not None
        stream = None if said else await _stream_or_none(context, namespace, name, spec)
        table = kept_table.table(namespace, name, spec, last, now, farewell.drained, stream)
        await kept.keep(context.api_client, namespace, table, context.leading)
    except kept.NoLongerLeading as ended:
        log.warning("%s/%s: %s", namespace, name, ended)
        return None
    except (NotOurs, ApiException, HTTPError, OSError, *STATUS_ERRORS) as error:
        message = f"the checkpoints could not be kept: {error}"
        _emit(body, Event("Warning", "CheckpointsLost", message))
        log.error("%s/%s: %s", namespace, name, message)
        return CHECKPOINTS_LOST
    where = names.kept_checkpoints(name)
    shards = len(table.status["leases"])
    how = (
        "after every worker handed off"
        if farewell.drained
        else "before every worker had handed off"
    )
    message = (
        f"the checkpoints of {shards} shards are kept in ConfigMap {where} until "
        f"{table.expires.isoformat()}, {how}"
    )
    _emit(body, Event("Normal", "CheckpointsKept", message))
    return f"ConfigMap {where}"


def _emit(body: kopf.Body, event: Event) -> None:
    post = kopf.warn if event.type == "Warning" else kopf.info
    post(body, reason=event.reason, message=event.message)


def _scale(
    api_client: k8s.ApiClient, namespace: str, name: str, owner_uid: str, replicas: int
) -> None:
    """Sets the workers' Deployment's replicas: only ours (docs/security.md#ownership),
    read first and its uid sent with the apply, as `apply_owned` does; raises NotOurs."""
    apps = k8s.AppsV1Api(api_client)
    patch: Any = children.scale_patch(name, replicas)
    deployment = patch["metadata"]["name"]
    existing = apps.read_namespaced_deployment(
        deployment, namespace, _request_timeout=KUBERNETES_TIMEOUT_SECONDS
    ).metadata
    if existing is None or not controlled_by(existing.owner_references, owner_uid):
        raise NotOurs("Deployment", deployment)
    patch["metadata"]["uid"] = existing.uid  # replaced meanwhile: 409, not applied
    apply(
        apps.patch_namespaced_deployment,
        deployment,
        namespace,
        patch,
        manager=AUTOSCALER,
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
