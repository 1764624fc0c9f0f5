"""The simulated operator: the real Coordinator, ConsumerLoop and StatusWriter, run the
way `controller/runner.py` runs them, over a simulated apiserver and stream. A crash
loses everything but what the apiserver holds; a restart starts from that."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.ledger import Ledger
from sim.stream import ShardGone, SimSource
from sim.world import EPOCH, World
from streamconsumer.controller.autoscaler import Autoscaler
from streamconsumer.controller.loop import ConsumerLoop, LoopSettings, StatusWrite
from streamconsumer.controller.state import Coordinator, creation_time, durable_from_status
from streamconsumer.controller.status import (
    Conflict,
    StaleState,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
)
from streamconsumer.core.leases import CheckpointDeferred, CheckpointRefused
from streamconsumer.models import CheckpointRequest, HeartbeatRequest, HeartbeatResponse
from streamconsumer.models.resource import ResetRequest, StreamConsumerSpec
from streamconsumer.worker.shard import Answer

NAME, NAMESPACE = "sim", "sim"
TICK = 0.2  # the runner's idle loop period
WAIT_SECONDS = 10.0  # checkpoint(wait=true) answers unsaved after this
LISTING_TIMEOUT = 30.0
WRITE_LATENCY = (0.002, 0.03)


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
    writes: int = 0
    annotations: dict[str, str] = field(default_factory=dict)

    def get(self) -> dict[str, Any]:
        return copy.deepcopy(
            {
                "metadata": {
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
        body = self.api.get()
        spec = StreamConsumerSpec.model_validate(body["spec"])
        durable = durable_from_status(body["status"])
        self.coordinator = Coordinator(spec, durable, self.world.now, created=creation_time(body))
        self.reset_requested()  # as main.consume: one asked for while it was down
        desired = body["status"].get("desiredReplicas")
        self.coordinator.desired_replicas = desired
        self.loop = ConsumerLoop(
            NAME,
            self.coordinator,
            LoopSettings(shard_sync_seconds=1.0),
            generation=lambda: 1,
            autoscaler=Autoscaler(desired if desired is not None else spec.replicas),
        )
        self.writer = StatusWriter(self.api, NAMESPACE, NAME)
        self.writer.adopt(body)
        self._listing: int | None = None  # the id of the listing in flight
        self._writing = False
        self._waiters: list[tuple[int, Callable[[Answer], None]]] = []
        self.up = True
        self._tick_at = None
        self.wake(0.0)

    def crash(self, downtime: float) -> None:
        if not self.up:
            return
        self.up = False
        self.incarnation += 1
        self.restarts += 1
        self.world.after(downtime, self.start)

    def reset_requested(self) -> None:
        """As main.reset_requested: the annotation changed."""
        if self.up and (request := ResetRequest.on(self.api.get())) is not None:
            self.coordinator.request_reset(request)
            self.wake()

    def spec_changed(self) -> None:
        if self.up:
            self.coordinator.update_spec(StreamConsumerSpec.model_validate(self.api.spec))
            self.wake()

    def _alive(self, incarnation: int) -> Callable[[Callable[[], None]], Callable[[], None]]:
        def guard(callback: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                if self.up and self.incarnation == incarnation:
                    callback()

            return run

        return guard

    def wake(self, delay: float = 0.001) -> None:
        """Run the loop within `delay` (one pending tick at a time: the soonest)."""
        when = self.world.now + delay
        if self._tick_at is not None and self._tick_at <= when:
            return
        self._tick_at = when
        self._plan += 1
        plan = self._plan
        self.world.at(when, self._alive(self.incarnation)(lambda: self._tick(plan)))

    # --- the runner's loop -------------------------------------------------------------

    def _tick(self, plan: int) -> None:
        if plan != self._plan:
            return  # a sooner tick ran instead
        self._tick_at = None
        now = self.world.now
        guard = self._alive(self.incarnation)
        loop = self.loop
        if self._listing is None and loop.sync_due(now):
            loop.sync_started(now)
            listing = self._listing = self.world.rng.randrange(1 << 30)
            slow = now < self.listing_slow_until
            latency = self.world.rng.uniform(40.0, 60.0) if slow else 0.01
            if latency > LISTING_TIMEOUT:
                self.world.after(LISTING_TIMEOUT, guard(lambda: self._listed(listing, None)))
            else:
                self.world.after(latency, guard(lambda: self._listed(listing, now)))
        if probes := loop.probes_due(now):
            measured: dict[str, int | None] = {}
            for shard_id, start in probes:
                with contextlib.suppress(ShardGone):  # as the runner: a failed probe is skipped
                    measured[shard_id] = self.source.backlog(shard_id, start)
            loop.probes_done(measured, now)
        loop.step(now)
        if (decision := loop.autoscale(now)) is not None:
            before, after, lag = decision
            self.scale(after)
            assert loop.autoscaler is not None
            loop.autoscaler.scaled(after)
            loop.scaled(before, after, lag)
        if not self._writing and (write := loop.write_due(now)) is not None:
            self._writing = True
            latency = self.world.rng.uniform(*WRITE_LATENCY)
            self.world.after(latency, guard(lambda: self._written(write)))
        loop.take_events()
        self.wake(TICK)

    def _listed(self, listing: int, started: float | None) -> None:
        if listing != self._listing:
            return
        self._listing = None
        now = self.world.now
        if started is None:
            self.loop.sync_failed(f"listing shards timed out after {LISTING_TIMEOUT:.0f}s", now)
        elif started < self.listing_failing_until:
            self.loop.sync_failed("ListShards: LimitExceededException", now)
        else:
            self.loop.sync_succeeded(self.source.list_shards(), now)
        self.wake()

    def _written(self, write: StatusWrite) -> None:
        self._writing = False
        now = self.world.now
        try:
            self.writer.write(write.body)
        except StaleState as stale:
            self.writer.adopt(stale.current)
            self.loop.write_stale(durable_from_status(stale.current.get("status")), now)
        except (StatusInvalid, StatusUnavailable) as error:
            self.loop.write_failed(write, str(error), now)
        else:
            self.loop.write_succeeded(write, now)
            saved = self.coordinator.persisted_version
            for waiter in [w for w in self._waiters if w[0] <= saved]:
                self._waiters.remove(waiter)
                waiter[1](Answer.SAVED)
        self.wake()

    # --- the worker API ------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        response = self.coordinator.heartbeat(request, self.world.now)
        self.wake()
        return response

    def checkpoint(self, request: CheckpointRequest, answer: Callable[[Answer], None]) -> None:
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

        def give_up() -> None:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                answer(Answer.ACCEPTED)

        self.world.after(WAIT_SECONDS, self._alive(self.incarnation)(give_up))
