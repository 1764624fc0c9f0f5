"""The per-consumer loop: sync shards, run the lease engine, report what it did as
Events, and persist the lease table (coalesced, about once a second)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from streamconsumer.controller import metrics
from streamconsumer.controller.autoscaler import Autoscaler
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.registry import ManagedConsumer
from streamconsumer.controller.state import Coordinator, leases_from_status
from streamconsumer.controller.status import StaleState, StatusWriter, render
from streamconsumer.core.leases import Action, CancelHandoff, Expire, Grant, Revoke
from streamconsumer.models.resource import Condition, StreamConsumerSpec
from streamconsumer.sources.base import StreamSource

log = logging.getLogger(__name__)
EventSink = Callable[[str, str, str], None]  # (type, reason, message)


def describe(action: Action) -> tuple[str, str, str]:
    if isinstance(action, Grant):
        return (
            "Normal",
            "LeaseGranted",
            f"{action.shard_id} to {action.worker} (epoch {action.epoch})",
        )
    if isinstance(action, Revoke):
        to = action.to or "nobody yet"
        return "Normal", "HandOff", f"{action.shard_id} from {action.worker} to {to}"
    if isinstance(action, CancelHandoff):
        return "Normal", "HandOffCancelled", f"{action.shard_id} stays with {action.worker}"
    assert isinstance(action, Expire)
    shards = ", ".join(action.shard_ids) or "no shards"
    return "Warning", "LeaseExpired", f"{action.worker} went silent; released {shards}"


async def run_consumer(
    consumer: ManagedConsumer,
    source: StreamSource,
    writer: StatusWriter,
    config: OperatorConfig,
    generation: Callable[[], int | None],
    emit: EventSink,
    stopped: Callable[[], bool],
    autoscaler: Autoscaler | None = None,
) -> None:
    coordinator = consumer.coordinator
    last_sync = -float("inf")
    last_write = -float("inf")
    source_error: str | None = None
    conditions: list[Condition] = []
    listed_children: set[str] = set()
    lag_gauges = metrics.LagGauges(consumer.namespace, consumer.name)
    while not stopped():
        now = time.monotonic()
        finished_unknown = any(
            lease.checkpoint == "SHARD_END" and shard_id not in listed_children
            for shard_id, lease in coordinator.leases.items()
        )
        if now - last_sync >= config.shard_sync_seconds or finished_unknown:
            last_sync = now
            try:
                shards = await asyncio.to_thread(source.list_shards)
            except (ClientError, BotoCoreError) as error:
                if source_error is None:
                    emit("Warning", "StreamUnavailable", str(error))
                source_error = str(error)
                coordinator.version += 1
            else:
                if source_error is not None:
                    source_error = None
                    coordinator.version += 1
                known = {s.id for s in coordinator.shards}
                if coordinator.shards_known and any(s.id not in known for s in shards):
                    new = sorted(s.id for s in shards if s.id not in known)
                    emit("Normal", "Resharded", f"new shards: {', '.join(new)}")
                listed_children = {p for s in shards for p in s.parents}
                coordinator.set_shards(shards)
        for action in coordinator.step(time.monotonic()):
            emit(*describe(action))
            metrics.count_action(consumer.namespace, consumer.name, action)
        lag_gauges.update(
            coordinator.lag_millis(),
            workers=sum(1 for w in coordinator.workers.values() if not w.draining),
            open_shards=sum(1 for s in coordinator.shards if not s.closed),
        )
        if autoscaler is not None:
            scaled = await asyncio.to_thread(autoscaler.tick, time.monotonic(), coordinator)
            if scaled is not None:
                before, after, lag = scaled
                emit("Normal", "Scaled", f"workers {before} -> {after}: lag {lag:.1f}s")
                coordinator.desired_replicas = after
                coordinator.version += 1
        now = time.monotonic()
        if (
            coordinator.version > coordinator.persisted_version
            and now - last_write >= config.status_interval_seconds
        ):
            version = coordinator.version
            status = render(consumer.name, coordinator, generation(), conditions, source_error)
            conditions = status.conditions
            try:
                await asyncio.to_thread(writer.write, status.wire())
            except StaleState as stale:
                # Another replica wrote a newer lease table: adopt it rather than fight.
                log.warning(
                    "%s/%s: status changed elsewhere; reloading", consumer.namespace, consumer.name
                )
                writer.adopt(stale.current)
                adopt(coordinator, stale.current.get("status"), time.monotonic())
                continue
            last_write = time.monotonic()
            metrics.STATUS_WRITES.labels(consumer.namespace, consumer.name).inc()
            await consumer.mark_persisted(version)
        await consumer.sleep(min(0.2, config.status_interval_seconds))


def adopt(coordinator: Coordinator, status: Mapping[str, Any] | None, now: float) -> None:
    fresh = Coordinator(coordinator.spec, leases_from_status(status), now)
    coordinator.leases = fresh.leases
    coordinator.workers = fresh.workers
    coordinator.version += 1


def spec_of(body: Mapping[str, Any]) -> StreamConsumerSpec:
    return StreamConsumerSpec.model_validate(body.get("spec", {}))
