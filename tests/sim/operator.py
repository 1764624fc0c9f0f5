"""The simulated operator process: the production ConsumerDriver, loaded by the
production `load`, its jobs run on the event queue (`SimJobs`) against a simulated
apiserver and stream. A job's call lands when its latency has passed, whether or not
its caller still waits (timeouts do not stop threads); a crash loses everything but
what the apiserver holds, and the calls already sent still land; a restart is a new
term that must fence the status before it serves."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sim.ledger import Ledger, Violation
from sim.stream import SimSource
from sim.world import EPOCH, World
from streamconsumer.controller.driver import ConsumerDriver, Timeouts, load
from streamconsumer.controller.jobs import Outcome
from streamconsumer.controller.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.status import (
    Conflict,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
)
from streamconsumer.core.leases import CheckpointDeferred, CheckpointRefused
from streamconsumer.models import CheckpointRequest, HeartbeatRequest, HeartbeatResponse
from streamconsumer.models.resource import ResetRequest, StreamConsumerSpec
from streamconsumer.sources.base import StreamSource
from streamconsumer.worker.shard import Answer

T = TypeVar("T")
NAME, NAMESPACE = "sim", "sim"
TICK = 0.2  # the runner's idle loop period
WAIT_SECONDS = 10.0  # checkpoint(wait=true) answers unsaved after this
TIMEOUTS = Timeouts(listing=30.0, status_write=10.0, scale=10.0)
WRITE_LATENCY = (0.002, 0.03)
SLOW_WRITE_LATENCY = (2.0, 25.0)  # an apiserver under load: some land past the timeout


@dataclass
class SimApiServer:
    """One StreamConsumer object with a resourceVersion; writes can be made to fail."""

    world: World
    ledger: Ledger
    spec: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    failing_until: float = -1.0
    failure: str = "unavailable"  # unavailable | lost_answer | invalid
    slow_until: float = -1.0
    writes: int = 0
    annotations: dict[str, str] = field(default_factory=dict)

    def get(self) -> dict[str, Any]:
        return copy.deepcopy(
            {
                "metadata": {
                    "name": NAME,
                    "namespace": NAMESPACE,
                    "annotations": self.annotations,
                    "resourceVersion": str(self.version),
                    "creationTimestamp": EPOCH.isoformat().replace("+00:00", "Z"),
                },
                "spec": self.spec,
                "status": self.status,
            }
        )

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        failing = self.world.now < self.failing_until
        if failing and self.failure == "unavailable":
            raise StatusUnavailable("HTTP 500: etcd leader changed")
        if failing and self.failure == "invalid":
            raise StatusInvalid("status.leases: Too many properties")
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise Conflict("the object has been modified")
        self.status = copy.deepcopy(body["status"])
        self.version += 1
        self.writes += 1
        self.ledger.saved(self.status)
        if failing and self.failure == "lost_answer":
            raise StatusUnavailable("timed out (the write landed)")
        return self.get()

    def edit_spec(self, **changes: Any) -> None:
        for path, value in changes.items():
            target = self.spec
            *parents, leaf = path.split(".")
            for key in parents:
                target = target.setdefault(key, {})
            target[leaf] = value
        self.version += 1


class SimJobs:
    """The driver's Jobs on the event queue. `alive` is the process that started them:
    a dead process hears of nothing, but what it sent still lands."""

    def __init__(
        self,
        world: World,
        latency: Callable[[str], float],
        alive: Callable[[], bool],
        wake: Callable[[], None],
    ) -> None:
        self._world = world
        self._latency = latency
        self._alive = alive
        self._wake = wake

    def start(
        self,
        kind: str,
        call: Callable[[], T],
        timeout: float,
        done: Callable[[Outcome[T]], None],
    ) -> None:
        settled = False

        def settle(outcome: Outcome[T]) -> None:
            nonlocal settled
            if settled or not self._alive():
                return
            settled = True
            done(outcome)
            self._wake()

        def land() -> None:
            try:
                outcome: Outcome[T] = Outcome(value=call())
            except Violation:
                raise  # the ledger's check inside the simulated apiserver: not an I/O error
            except Exception as error:
                outcome = Outcome(error=error)
            settle(outcome)

        self._world.after(self._latency(kind), land)
        self._world.after(timeout, lambda: settle(Outcome(error=TimeoutError())))


class FlakySource:
    """The stream as the operator's Kinesis client sees it: listings can fail or be slow."""

    def __init__(self, source: SimSource, operator: SimOperator) -> None:
        self._source = source
        self._operator = operator

    def list_shards(self) -> Any:
        if self._operator.world.now < self._operator.listing_failing_until:
            raise RuntimeError("ListShards: LimitExceededException")
        return self._source.list_shards()

    def backlog(self, shard_id: str, start: Any) -> int | None:
        return self._source.backlog(shard_id, start)


class SimOperator:
    def __init__(
        self,
        world: World,
        api: SimApiServer,
        source: SimSource,
        ledger: Ledger,
        scale: Callable[[int], None],
    ) -> None:
        self.world = world
        self.scale = scale
        self.api = api
        self.source = source
        self.ledger = ledger
        self.up = False
        self.incarnation = 0
        self.listing_failing_until = -1.0
        self.listing_slow_until = -1.0
        self.restarts = 0
        self._tick_at: float | None = None
        self._plan = 0

    # --- life ------------------------------------------------------------------------

    def start(self) -> None:
        self.incarnation += 1
        incarnation = self.incarnation
        self.up = True
        writer = StatusWriter(self.api, NAMESPACE, NAME, holder=f"operator/{incarnation}")
        self.loop: ConsumerLoop = load(
            self.api.get(),
            writer,
            LoopSettings(shard_sync_seconds=1.0),
            self.world.now,
            generation=lambda: 1,
        )
        self.coordinator = self.loop.coordinator
        jobs = SimJobs(self.world, self._latency, lambda: self._alive(incarnation), self.wake)
        self._waiters: list[tuple[int, Callable[[Answer], None]]] = []
        self.driver = ConsumerDriver(
            NAMESPACE,
            NAME,
            self.loop,
            self._source,
            writer,
            jobs,
            lambda: self.world.now,
            lambda event: None,
            TIMEOUTS,
            scale=self.scale,
            saved=self._saved,
        )
        self._tick_at = None
        self.wake(0.0)

    def _source(self, _: Any) -> StreamSource:
        return FlakySource(self.source, self)  # type: ignore[return-value]

    def _alive(self, incarnation: int) -> bool:
        return self.up and self.incarnation == incarnation

    def crash(self, downtime: float) -> None:
        if not self.up:
            return
        self.up = False
        self.driver.stop()
        self.incarnation += 1
        self.restarts += 1
        self.world.after(downtime, self.start)

    def reset_requested(self) -> None:
        """As handlers.reset_requested: the annotation changed."""
        if self.up and (request := ResetRequest.on(self.api.get())) is not None:
            self.coordinator.request_reset(request)
            self.wake()

    def spec_changed(self) -> None:
        if self.up:
            self.coordinator.update_spec(StreamConsumerSpec.model_validate(self.api.spec))
            self.wake()

    def _latency(self, kind: str) -> float:
        rng, now = self.world.rng, self.world.now
        if kind == "listing" and now < self.listing_slow_until:
            return rng.uniform(40.0, 60.0)
        if kind == "status":
            slow = now < self.api.slow_until
            return rng.uniform(*(SLOW_WRITE_LATENCY if slow else WRITE_LATENCY))
        return 0.01

    def wake(self, delay: float = 0.001) -> None:
        """Tick within `delay` (one pending tick at a time: the soonest)."""
        when = self.world.now + delay
        if self._tick_at is not None and self._tick_at <= when:
            return
        self._tick_at = when
        self._plan += 1
        plan, incarnation = self._plan, self.incarnation
        self.world.at(when, lambda: self._tick(plan, incarnation))

    def _tick(self, plan: int, incarnation: int) -> None:
        if plan != self._plan or not self._alive(incarnation):
            return  # a sooner tick ran instead, or the process is gone
        self._tick_at = None
        self.driver.tick()
        self.wake(TICK)

    def _saved(self) -> None:
        saved = self.coordinator.persisted_version
        for waiter in [w for w in self._waiters if w[0] <= saved]:
            self._waiters.remove(waiter)
            waiter[1](Answer.SAVED)

    # --- the worker API ------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse | None:
        """None: 503, come back later (not serving this consumer yet)."""
        if not self.loop.serving:
            return None
        response = self.coordinator.heartbeat(request, self.world.now)
        self.wake()
        return response

    def checkpoint(self, request: CheckpointRequest, answer: Callable[[Answer], None]) -> None:
        if not self.loop.serving:
            answer(Answer.UNREACHABLE)
            return
        try:
            lease = self.coordinator.checkpoint(request)
        except CheckpointRefused as refused:
            answer(Answer.LOST if refused.lease_lost else Answer.INVALID)
            return
        except CheckpointDeferred:
            answer(Answer.UNREACHABLE)  # as the API's 503: asked again soon
            return
        self.ledger.accepted(request.shard_id, lease.checkpoint)
        self.wake()
        if not request.wait:
            answer(Answer.ACCEPTED)
            return
        waiter = (self.coordinator.version, answer)
        self._waiters.append(waiter)
        incarnation = self.incarnation

        def give_up() -> None:
            if self._alive(incarnation) and waiter in self._waiters:
                self._waiters.remove(waiter)
                answer(Answer.ACCEPTED)

        self.world.after(WAIT_SECONDS, give_up)
