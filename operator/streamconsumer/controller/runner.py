"""Runs one consumer's ConsumerLoop for real: listing, backlog probes and status writes
are background jobs in threads, each with its own timeout, so the engine keeps stepping
(expiries, grants, checkpoints) while Kinesis or the apiserver is slow."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from streamconsumer.controller import metrics
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.loop import ConsumerLoop, Event, StatusWrite
from streamconsumer.controller.registry import ManagedConsumer
from streamconsumer.controller.state import durable_from_status
from streamconsumer.controller.status import (
    StaleState,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models import StartPosition
from streamconsumer.models.resource import Source
from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.registry import selected

log = logging.getLogger(__name__)
T = TypeVar("T")
SourceFactory = Callable[[Source], StreamSource]
EventSink = Callable[[Event], None]


class Job(Generic[T]):
    """A blocking call run in a thread with a timeout; polled by the loop."""

    def __init__(self, call: Callable[[], T], timeout: float, wake: Callable[[], None]) -> None:
        self.task = asyncio.create_task(asyncio.wait_for(asyncio.to_thread(call), timeout))
        self.task.add_done_callback(lambda _: wake())
        self.timeout = timeout

    def done(self) -> bool:
        return self.task.done()


async def run_consumer(
    consumer: ManagedConsumer,
    loop: ConsumerLoop,
    make_source: SourceFactory,
    writer: StatusWriter,
    config: OperatorConfig,
    emit: EventSink,
    stopped: Callable[[], bool],
    scale: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    coordinator = consumer.coordinator
    source_spec = coordinator.spec.source
    source = make_source(source_spec)
    advice = selected(source_spec)[0].errors
    listing: Job[list[Shard]] | None = None
    probing: Job[dict[str, int | None]] | None = None
    writing: tuple[Job[None], StatusWrite] | None = None
    lag_gauges = metrics.LagGauges(consumer.namespace, consumer.name)
    labels = (consumer.namespace, consumer.name)
    while not stopped():
        now = clock()
        if coordinator.spec.source != source_spec:  # e.g. a new endpoint URL
            source_spec = coordinator.spec.source
            source = make_source(source_spec)
            advice = selected(source_spec)[0].errors
        # --- shard listing
        if listing is not None and listing.done():
            try:
                loop.sync_succeeded(listing.task.result(), clock())
            except Exception as error:  # every failure is shown, none stops us
                said = failure(error, "listing shards", listing.timeout, advice)
                loop.sync_failed(said, clock())
            listing = None
        if listing is None and loop.sync_due(now):
            loop.sync_started(now)
            listing = Job(source.list_shards, config.shard_sync_timeout_seconds, consumer.wake)
        # --- backlog of unowned shards (lag with no worker to report it)
        if probing is not None and probing.done():
            try:
                loop.probes_done(probing.task.result(), clock())
            except Exception as error:
                log.info("%s/%s: backlog probe failed: %s", *labels, error)
            probing = None
        if probing is None and (probes := loop.probes_due(now)):
            probing = Job(
                functools.partial(_measure, source, probes),
                config.shard_sync_timeout_seconds,
                consumer.wake,
            )
        # --- the engine
        for action in loop.step(clock()):
            metrics.count_action(consumer.namespace, consumer.name, action)
        lag_gauges.update(
            coordinator.lag_millis(),
            workers=sum(1 for w in coordinator.workers.values() if not w.draining),
            open_shards=sum(1 for s in coordinator.shards if not s.closed),
        )
        if scale is not None and (decision := loop.autoscale(clock())) is not None:
            before, after, lag = decision
            try:
                await asyncio.to_thread(scale, after)
            except Exception as error:  # tried again on the next decision
                log.warning("%s/%s: scaling to %d failed: %s", *labels, after, error)
            else:
                assert loop.autoscaler is not None
                loop.autoscaler.scaled(after)
                loop.scaled(before, after, lag)
        # --- the status
        if writing is not None and writing[0].done():
            job, write = writing
            writing = None
            try:
                job.task.result()
            except StaleState as stale:
                writer.adopt(stale.current)
                loop.write_stale(durable_from_status(stale.current.get("status")), clock())
            except (StatusInvalid, StatusUnavailable, TimeoutError) as error:
                loop.write_failed(write, failure(error, "writing status", job.timeout), clock())
            except Exception as error:  # a bug must not stop the loop either: show it, retry
                log.exception("%s/%s: status write failed", *labels)
                loop.write_failed(write, failure(error, "writing status", job.timeout), clock())
            else:
                loop.write_succeeded(write, clock())
                metrics.STATUS_WRITES.labels(*labels).inc()
                await consumer.mark_persisted()
        if writing is None and (due := loop.write_due(clock())) is not None:
            job = Job(
                functools.partial(writer.write, due.body),
                config.status_write_timeout_seconds,
                consumer.wake,
            )
            writing = (job, due)
        for event in loop.take_events():
            emit(event)
        await consumer.sleep(min(0.2, config.status_interval_seconds))
    for job_or_none in (listing, probing, writing[0] if writing else None):
        if job_or_none is not None:
            job_or_none.task.cancel()


def _measure(
    source: StreamSource, probes: list[tuple[str, StartPosition]]
) -> dict[str, int | None]:
    return {shard_id: source.backlog(shard_id, start) for shard_id, start in probes}


def failure(
    error: BaseException, doing: str, timeout: float, advice: Mapping[str, str] | None = None
) -> str:
    """What failed, for Degraded and an Event; with the kind's advice on AWS's code."""
    if isinstance(error, TimeoutError):
        return f"{doing} timed out after {timeout:.0f}s"
    code, message = aws_error(error)
    if not code:
        return f"{doing}: {error}"
    hint = (advice or {}).get(code)
    return f"{doing}: {code}: {message}" + (f" ({hint})" if hint else "")
