"""One consumer's driver: the single place that turns the ConsumerLoop's decisions into
jobs (list the shards, probe backlogs, write the status, scale the workers) and feeds
their outcomes back. It never blocks and never sleeps: the production host
(`runner.py`, asyncio and thread pools) and the simulation (an event queue) both run
this class, and only the `Jobs` port and the clock differ between them
(docs/design.md#one-driver).

Every job may answer late or not at all: a job past its timeout is answered
`TimeoutError` while its call may still run on and land (a status write included).
The status writer's term fence makes such a late write harmless, and a driver whose
writer learns that a newer term fenced the status stops for good (`deposed`)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from streamconsumer import audit
from streamconsumer.controller import metrics
from streamconsumer.controller.aws.access import AccessRefused
from streamconsumer.controller.aws.assumed_role import ERRORS as ROLE_ERRORS
from streamconsumer.controller.consumer.autoscaler import Autoscaler
from streamconsumer.controller.consumer.jobs import Job, Jobs, Outcome
from streamconsumer.controller.consumer.loop import ConsumerLoop, Event, LoopSettings, StatusWrite
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.render import said_complete
from streamconsumer.controller.leases.state import creation_time, durable_from_status
from streamconsumer.controller.leases.status import (
    STATUS_ERRORS,
    Deposed,
    StaleState,
    StatusWriter,
    Superseded,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.core.token_bucket import TokenBucket
from streamconsumer.models import StartPosition
from streamconsumer.models.kept import KeptTable
from streamconsumer.models.resource import Source, StreamConsumerSpec
from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.registry import selected

log = logging.getLogger(__name__)

# The kinds of job that call the stream's API (Kinesis, DynamoDB Streams), not Kubernetes.
LISTING, PROBE = "listing", "probe"
STREAM_JOBS = (LISTING, PROBE)
SourceFactory = Callable[[Source], StreamSource]
EventSink = Callable[[Event], None]


@dataclass(frozen=True)
class Timeouts:
    listing: float = 30.0
    status_write: float = 10.0
    scale: float = 10.0


class ConsumerDriver:
    def __init__(
        self,
        namespace: str,
        name: str,
        loop: ConsumerLoop,
        make_source: SourceFactory,
        writer: StatusWriter,
        jobs: Jobs,
        clock: Callable[[], float],
        emit: EventSink,
        timeouts: Timeouts = Timeouts(),
        scale: Callable[[int], None] | None = None,
        saved: Callable[[], None] = lambda: None,
        probes: TokenBucket | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.loop = loop
        self.coordinator = loop.coordinator
        self._make_source = make_source
        self._source_spec = self.coordinator.spec.source
        self._source = make_source(self._source_spec)
        self._advice = selected(self._source_spec)[0].errors  # the kind's word on AWS codes
        self._writer = writer
        self._jobs = jobs
        self._clock = clock
        self._emit = emit
        self._timeouts = timeouts
        self._scale = scale
        self._saved = saved  # the status now holds a newer version (checkpoint waiters)
        # Backlog probes, shared by every consumer of the process: 200 consumers' 32
        # probes each per listing period took 40% of the operator's CPU (docs/sizing.md).
        self._probes = probes
        self._busy: set[str] = set()  # kinds of job in flight: one of each at a time
        self.stopped = False
        self._gauges = metrics.ConsumerGauges(namespace, name)

    @property
    def deposed(self) -> bool:
        return self.loop.deposed is not None

    def waiting_for(self, kind: str) -> bool:
        """Is a job of this kind in flight?"""
        return kind in self._busy

    def stop(self) -> None:
        """No new job; outcomes still to come are dropped; its series leave /metrics."""
        self.stopped = True
        self._gauges.clear()

    def tick(self) -> None:
        """Starts what is due and steps the engine once."""
        if self.stopped or self.deposed:
            return
        loop, coordinator = self.loop, self.coordinator
        now = self._clock()
        if coordinator.spec.source != self._source_spec:  # e.g. a new endpoint URL
            self._source_spec = coordinator.spec.source
            self._source = self._make_source(self._source_spec)
            self._advice = selected(self._source_spec)[0].errors
        if LISTING not in self._busy and loop.sync_due(now):
            known = tuple(coordinator.shards)
            listing = functools.partial(list_stream, self._source, loop.sync_started(now), known)
            self._start(Job(LISTING, listing, self._timeouts.listing, self._listed))
        allowed = None if self._probes is None else self._probes.available(now)
        if PROBE not in self._busy and (probes := loop.probes_due(now, allowed)):
            if self._probes is not None:
                self._probes.take(len(probes), now)
            call = functools.partial(_measure, self._source, probes)
            self._start(Job(PROBE, call, self._timeouts.listing, self._probed))
        for action in loop.step(self._clock()):
            metrics.count_action(self.namespace, self.name, action)
        self._gauges.update(
            coordinator.lag_millis(),
            workers=sum(1 for w in coordinator.workers.values() if not w.draining),
            open_shards=sum(1 for s in coordinator.shards if not s.closed),
            blocked_shards=len(coordinator.blocked_shards()),
            stuck_shards=len(coordinator.watch.stuck),
        )
        if (
            self._scale is not None
            and "scale" not in self._busy
            and (decision := loop.autoscale(self._clock())) is not None
        ):
            scale = functools.partial(self._scale, decision[1])
            self._start(
                Job("scale", scale, self._timeouts.scale, functools.partial(self._scaled, decision))
            )
        if "status" not in self._busy and (due := loop.write_due(self._clock())) is not None:
            # Prepared now, so its resourceVersion is the one seen now (docs/design.md#one-driver).
            write = functools.partial(self._writer.send, self._writer.prepare(due.body))
            written = functools.partial(self._written, due)
            self._start(Job("status", write, self._timeouts.status_write, written))
        self._flush_events()

    # --- jobs -----------------------------------------------------------------------

    def _start(self, job: Job[Any]) -> None:
        """One job of each kind at a time; none is delivered once the driver stopped."""
        self._busy.add(job.kind)

        def finished(outcome: Outcome[Any]) -> None:
            self._busy.discard(job.kind)
            if not self.stopped:
                job.done(outcome)
                self._flush_events()

        self._jobs.start(dataclasses.replace(job, done=finished))

    def _listed(self, outcome: Outcome[tuple[list[Shard], str | None]]) -> None:
        try:
            shards, stream = outcome.result()
        except Exception as error:  # every failure is shown, none stops us
            self.loop.sync_failed(
                failure(error, "listing shards", self._timeouts.listing, self._advice),
                self._clock(),
            )
        else:
            self.loop.sync_succeeded(shards, self._clock(), stream)

    def _probed(self, outcome: Outcome[dict[str, int | None]]) -> None:
        try:
            self.loop.probes_done(outcome.result(), self._clock())
        except Exception as error:
            message = failure(error, "backlog probe", self._timeouts.listing, self._advice)
            log.info("%s/%s: %s", self.namespace, self.name, message)

    def _scaled(self, decision: tuple[int, int, float], outcome: Outcome[None]) -> None:
        before, after, lag = decision
        try:
            outcome.result()
        except Exception as error:  # tried again on the next decision
            log.warning("%s/%s: scaling to %d failed: %s", self.namespace, self.name, after, error)
        else:
            self.loop.scaled(before, after, lag, self._clock())

    def _written(self, write: StatusWrite, outcome: Outcome[None]) -> None:
        loop, now = self.loop, self._clock()
        try:
            outcome.result()
        except Superseded:  # cannot happen to the newest attempt: shown as a failure
            self._write_failed(write, "status write superseded", now)
        except Deposed as deposed:
            log.warning("%s/%s: %s; this replica stops", self.namespace, self.name, deposed)
            loop.deposed_by(str(deposed))
        except StaleState as stale:
            try:  # read before adopting: a table this version cannot parse stays theirs
                stored = durable_from_status(stale.current.get("status"))
            except ValueError as error:  # pydantic's ValidationError among them
                message = f"the stored status cannot be read by this operator: {error}"
                self._write_failed(write, message[:1024], now)
            else:
                self._writer.adopt(stale.current)
                loop.write_stale(stored, now)
        except (*STATUS_ERRORS, TimeoutError) as error:
            self._write_failed(
                write, failure(error, "writing status", self._timeouts.status_write), now
            )
        except Exception as error:  # a bug must not stop the loop either: show it, retry
            log.exception("%s/%s: status write failed", self.namespace, self.name)
            self._write_failed(
                write, failure(error, "writing status", self._timeouts.status_write), now
            )
        else:
            loop.write_succeeded(write, now)
            metrics.STATUS_WRITES.labels(self.namespace, self.name).inc()
            self._saved()

    def _write_failed(self, write: StatusWrite, message: str, now: float) -> None:
        metrics.STATUS_WRITE_FAILURES.labels(self.namespace, self.name).inc()
        self.loop.write_failed(write, message, now)

    def _flush_events(self) -> None:
        for event in self.loop.take_events():
            self._emit(event)


def load(
    body: dict[str, Any],
    writer: StatusWriter,
    settings: LoopSettings,
    now: float,
    generation: Callable[[], int | None],
    kept: KeptTable | None = None,
    wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
) -> ConsumerLoop:
    """A consumer's loop as a new term starts it: from the object as read (its status is
    the only durable state), workers given the restart grace, a reset asked for while no
    operator ran applied, the autoscaler carrying on from what it last asked for. The
    loop serves nobody until its first write (the fence) lands."""
    name = body["metadata"]["name"]
    writer.adopt(body)
    spec = StreamConsumerSpec.model_validate(body.get("spec", {}))
    status = body.get("status") or {}
    desired = status.get("desiredReplicas")
    durable, created = durable_from_status(status), creation_time(body)
    own_creation = created
    if kept is not None:  # a new object resuming a deleted one's table (controller/leases/kept.py)
        durable, created = durable_from_status(kept.status), kept.created
    coordinator = LeaseCoordinator(
        spec,
        durable,
        now,
        created=created,
        desired_replicas=desired,
        completed=spec.end is not None and said_complete(status),
        wall=wall,
        object_created=own_creation,
    )
    with contextlib.suppress(ValidationError):  # a bad one is reported by its handler
        if (reset := audit.reset_request(body)) is not None:
            coordinator.request_reset(reset)
    return ConsumerLoop(
        name,
        coordinator,
        settings,
        generation=generation,
        autoscaler=Autoscaler(desired if desired is not None else spec.replicas),
        paused_by=audit.pause_requester(body) if spec.paused else None,
        observed_generation=_generation(status.get("observedGeneration")),
    )


def _generation(stored: Any) -> int | None:
    """The stored status's observedGeneration if it is one (a status is only as sound as
    whoever may write it; a bad one is taken as none, not carried into the next write)."""
    return stored if type(stored) is int and stored >= 0 else None


def list_stream(
    source: StreamSource, described: bool, known: tuple[Shard, ...]
) -> tuple[list[Shard], str | None]:
    """The stream's shards and, if `described` or they differ from the `known` ones,
    which stream it is (docs/checkpoints.md#the-same-stream): asked after the listing,
    so a stream created again in between shows as the other one it is."""
    shards = source.list_shards()
    changed = described or tuple(shards) != known
    return shards, source.incarnation() if changed else None


def _measure(
    source: StreamSource, probes: list[tuple[str, StartPosition]]
) -> dict[str, int | None]:
    """Each shard on its own: one shard gone (retention) must not blank the others."""
    measured: dict[str, int | None] = {}
    for shard_id, start in probes:
        try:
            measured[shard_id] = source.backlog(shard_id, start)
        except Exception as error:
            log.debug("backlog of %s not measured: %s", shard_id, aws_error(error).message)
    return measured


def failure(
    error: BaseException, doing: str, timeout: float, advice: Mapping[str, str] | None = None
) -> str:
    """What failed, for Degraded and an Event; with the kind's advice on AWS's code."""
    if isinstance(error, TimeoutError):
        return f"{doing} timed out after {timeout:.0f}s"
    if isinstance(error, AccessRefused):  # our own words
        return f"{doing}: {error}"
    code, message = aws_error(error)
    if not code:
        return f"{doing}: {message}"
    hint = (advice or {}).get(code) or ROLE_ERRORS.get(code)  # STS's, for a roleArn
    return f"{doing}: {code}: {message}" + (f" ({hint})" if hint else "")
