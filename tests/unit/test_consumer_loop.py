"""The per-consumer loop: what it decides (ConsumerLoop, pure, on a fake clock) and how
the runner executes it (asyncio, with adapters that fail or hang)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

import pytest

from streamconsumer.controller.consumer.autoscaler import Autoscaler
from streamconsumer.controller.consumer.driver import (
    ConsumerDriver,
    SourceFactory,
    Timeouts,
    list_stream,
)
from streamconsumer.controller.consumer.jobs import ThreadJobs
from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.consumer.runner import run_consumer
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState, durable_from_status
from streamconsumer.controller.leases.status import (
    Conflict,
    StaleState,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
)
from streamconsumer.core.leases import Expire
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.core.token_bucket import TokenBucket
from streamconsumer.models import (
    CheckpointRequest,
    HeartbeatRequest,
    HeldShard,
    StartPosition,
)
from streamconsumer.models.resource import Source, StreamConsumerSpec
from streamconsumer.sources.kinds.kinesis import KinesisSpec
from streamconsumer.sources.registry import selected
from testbed.specs import consumer_spec

from .moments import CREATED


def spec(**extra: Any) -> StreamConsumerSpec:
    return consumer_spec(lease_seconds=6, **extra)


def make_loop(**extra: Any) -> ConsumerLoop:
    coordinator = LeaseCoordinator(spec(**extra), DurableState(), now=0.0, created=CREATED)
    autoscaler = Autoscaler(0) if "autoscaling" in extra else None
    settings = LoopSettings(shard_sync_seconds=10.0, relist_seconds=1.0)
    return ConsumerLoop("c", coordinator, settings, lambda: 1, autoscaler, observed_generation=1)


def condition(loop: ConsumerLoop, kind: str) -> tuple[str, str]:
    by_type = {c.type: c for c in loop.conditions}
    return by_type[kind].status, by_type[kind].message


def test_nothing_is_decided_before_the_fence_and_the_restart_wait_starts_when_it_lands() -> None:
    """Found by the simulation (two replicas, Lease renewals late, status writes failing):
    a new term whose fence took longer than a lease expired every worker at its first
    step, although none could have renewed: a replay of everything since the checkpoints."""
    status = {"leases": {"s0": {"owner": "w", "epoch": 2, "state": "Active", "checkpoint": "5"}}}
    coordinator = LeaseCoordinator(spec(), durable_from_status(status), now=0.0, created=CREATED)
    loop = ConsumerLoop("c", coordinator, LoopSettings(), lambda: 1)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    assert loop.step(60.0) == [], "no expiry while the fence has not landed"
    fence = loop.write_due(60.0)
    assert fence is not None
    loop.write_succeeded(fence, 60.0)
    assert loop.step(61.0) == [], "the restart wait counts from the fence"
    assert coordinator.leases["s0"].owner == "w"
    assert any(isinstance(a, Expire) for a in loop.step(60.0 + 40.0)), "silent, then expired"


def test_status_write_errors_are_retried_with_back_off_and_shown() -> None:
    """11.6: no write error ends the loop; each is an Event, Degraded, and a back-off."""
    loop = make_loop()
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    attempts = []
    now = 0.0
    for error in ("HTTP 500: etcd leader changed", "status.leases: Invalid value", None):
        write = loop.write_due(now)
        while write is None:
            now += 0.1
            write = loop.write_due(now)
        attempts.append(now)
        if error is None:
            loop.write_succeeded(write, now)
        else:
            loop.write_failed(write, error, now)
    assert attempts[1] - attempts[0] >= 1.0
    assert attempts[2] - attempts[1] >= 2.0, "the back-off grows"
    events = loop.take_events()
    assert [e.reason for e in events] == ["StatusWriteFailed"], "one event per episode"
    loop.coordinator.version += 1
    write = loop.write_due(now + 5)
    assert write is not None
    assert condition(loop, "Degraded") == ("False", ""), "cleared once a write lands"


def test_the_degraded_condition_names_what_failed() -> None:
    loop = make_loop()
    loop.sync_started(0.0)
    loop.sync_failed("ListShards: LimitExceededException", 0.0)
    write = loop.write_due(0.0)
    assert write is not None
    loop.write_failed(write, "HTTP 503", 0.0)
    write = loop.write_due(5.0)
    assert write is not None
    status, message = condition(loop, "Degraded")
    assert status == "True"
    assert "ListShards: LimitExceededException" in message
    assert "status write failed: HTTP 503" in message


def test_relisting_for_unseen_children_backs_off() -> None:
    """11.11: a finished shard whose children the listing lacks was relisted every 0.2 s."""
    loop = make_loop()
    coordinator = loop.coordinator
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("p", closed=True)], 0.0)
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    coordinator.step(0.0)
    coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id="p", epoch=1, sequence_number=SHARD_END)
    )
    starts = []
    now = 0.0
    while now < 10.0:
        if loop.sync_due(now):
            starts.append(now)
            loop.sync_started(now)
            loop.sync_succeeded([Shard("p", closed=True)], now)  # still no child listed
        now = round(now + 0.2, 1)
    assert starts == [1.0, 3.0, 7.0], "1 s, then doubling up to the sync period"


def test_a_consumer_at_zero_scales_up_when_records_wait() -> None:
    """11.4: with minReplicas 0 nobody reported lag, so nothing ever scaled up."""
    loop = make_loop(
        replicas=0,
        autoscaling={"minReplicas": 0, "maxReplicas": 4, "targetLagSeconds": 10},
    )
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 0.0)
    probes = loop.probes_due(0.0)
    assert [shard for shard, _ in probes] == ["s0", "s1"]
    loop.probes_done({"s0": 25_000, "s1": None}, 0.0)
    assert loop.autoscale(1.0) == (0, 2, 25.0), "3 for the lag, capped at 2 shards"


def test_probes_stay_within_what_the_operators_budget_allows() -> None:
    """Every consumer of a process draws its backlog probes from one budget: 200
    consumers' 32 each per listing took 40% of the operator's CPU (bench-many)."""
    loop = make_loop(replicas=0)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard(f"s{i}") for i in range(10)], 0.0)
    assert loop.probes_due(0.0, allowed=0) == [], "none left: none now, and asked again later"
    assert len(loop.probes_due(0.0, allowed=3)) == 3
    assert loop.probes_due(1.0, allowed=3) == [], "once per listing period, as before"
    assert [s for s, _ in loop.probes_due(20.0, allowed=None)][:1] == ["s3"], "round robin"


def test_a_token_bucket_gives_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=5.0)
    assert bucket.available(100.0) == 5
    bucket.take(5, 100.0)
    assert bucket.available(100.0) == 0
    assert bucket.available(101.0) == 2
    bucket.take(2, 101.0)
    assert bucket.available(50.0) == 0, "a clock that steps back gives nothing"
    assert bucket.available(1_000.0) == 5, "never more than the burst"


def test_a_new_term_decides_from_the_deployment_as_read_not_the_saved_count() -> None:
    """22.17, found by the soak: a term scaled the Deployment to 0 and ended before its
    status said so. The next term read 1 from the status, decided 1 and asked for no
    change, so the Deployment stayed at 0 and the shard was never read again."""
    autoscaling = {"minReplicas": 0, "maxReplicas": 4, "targetLagSeconds": 10}
    loop = make_loop(autoscaling=autoscaling)
    loop.autoscaler = Autoscaler(1)  # what the status saved
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    loop.probes_done({"s0": 5_000}, 0.0)
    assert loop.autoscale(1.0) is None, "1 is wanted, and the status says 1 runs"
    assert loop.deployment_read(0, 2.0), "the Deployment runs none: news"
    decision = loop.autoscale(3.0)
    assert decision == (0, 1, 5.0), "set again, from what runs"
    loop.scaled(*decision, 3.5)
    assert [e.message for e in loop.take_events() if e.reason == "Scaled"] == [
        "workers 0 -> 1: lag 5.0s"
    ]
    assert loop.autoscale(4.0) is None


def test_a_deployment_found_at_another_count_is_set_again() -> None:
    """22.18: once set, the count was trusted: a late scale call (an earlier term's, or
    one of ours given up on as timed out) or a hand's `kubectl scale` left the Deployment
    at another count for good when the decision did not change."""
    autoscaling = {"minReplicas": 0, "maxReplicas": 4, "targetLagSeconds": 10}
    loop = make_loop(autoscaling=autoscaling)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    loop.probes_done({"s0": 5_000}, 0.0)
    decision = loop.autoscale(1.0)
    assert decision == (0, 1, 5.0)
    loop.scaled(*decision, 2.0)
    assert not loop.deployment_read(0, 1.5), "read before the set landed: proves nothing"
    assert loop.autoscale(3.0) is None
    assert not loop.deployment_read(1, 4.0), "as set"
    assert loop.autoscale(4.0) is None
    assert loop.deployment_read(0, 5.0), "scaled to 0 behind the autoscaler's back"
    assert loop.autoscale(6.0) == (0, 1, 5.0), "set again"


def test_ready_holds_through_a_planned_hand_off() -> None:
    """11.13: Ready flipped to False on every hand-off (health checks flapped)."""
    loop = make_loop()
    coordinator = loop.coordinator
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 0.0)
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    coordinator.step(0.0)
    coordinator.heartbeat(
        HeartbeatRequest(
            worker="a", held=[HeldShard(shard_id="s0", epoch=1), HeldShard(shard_id="s1", epoch=1)]
        ),
        0.1,
    )
    coordinator.heartbeat(HeartbeatRequest(worker="b"), 0.2)
    coordinator.step(0.2)  # one shard moves to b: hand-off
    assert any(lease.state.value == "HandOff" for lease in coordinator.leases.values())
    assert loop.write_due(0.3) is not None
    assert condition(loop, "Ready")[0] == "True"
    assert condition(loop, "Progressing")[0] == "True"


def test_a_leaving_worker_leaves_the_status_at_once() -> None:
    """11.13: departed workers stayed listed for lease x 4/3."""
    loop = make_loop()
    coordinator = loop.coordinator
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    assert "a" in coordinator.workers
    coordinator.heartbeat(HeartbeatRequest(worker="a", draining=True), 1.0)
    assert "a" not in coordinator.workers


# --- the runner, for real asyncio ---------------------------------------------------------------


class HungSource:
    """ListShards answers once, then hangs (a Kinesis endpoint that stopped answering)."""

    def __init__(self) -> None:
        self.calls = 0

    def list_shards(self) -> list[Shard]:
        self.calls += 1
        if self.calls > 1:
            time.sleep(3.0)
        return [Shard("s0")]

    def open_reader(self, shard_id: str, start: StartPosition) -> Any:
        raise NotImplementedError

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        return None

    def incarnation(self) -> str:
        return "s created 2026-11-01T00:00:00+00:00"


class FlakyApi:
    """A StatusApi whose writes fail `failures` times (5xx, 422, conflict), then land."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.version = 1
        self.status: dict[str, Any] = {}
        self.writes = 0

    def get(self) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": str(self.version)}, "status": self.status}

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        self.status = body["status"]
        self.version += 1
        self.writes += 1
        return self.get()


async def drive(
    loop: ConsumerLoop,
    writer: StatusWriter,
    make_source: SourceFactory,
    timeouts: Timeouts,
    stopped: Any,
) -> ManagedConsumer:
    """The production host: ThreadJobs on a pool, run_consumer ticking the driver."""
    consumer = ManagedConsumer("n", "c", loop)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        jobs = ThreadJobs(pool, consumer.wake)
        driver = ConsumerDriver(
            "n", "c", loop, make_source, writer, jobs, time.monotonic, lambda e: None, timeouts
        )
        await run_consumer(consumer, driver, jobs, stopped)
    return consumer


def test_the_runner_keeps_stepping_and_writing_while_a_listing_hangs() -> None:
    """11.11 and 11.6 for real: a hung ListShards (timeout 1 s here) and failing writes
    stop neither the engine nor, once they recover, the status."""
    api = FlakyApi([StatusUnavailable("HTTP 500"), StatusInvalid("422"), Conflict("stale")])
    source = HungSource()

    async def run() -> ManagedConsumer:
        coordinator = LeaseCoordinator(
            spec(), DurableState(), now=time.monotonic(), created=CREATED
        )
        writer = StatusWriter(api, "n", "c", holder="test")
        writer.adopt(api.get())
        loop = ConsumerLoop(
            "c",
            coordinator,
            LoopSettings(
                shard_sync_seconds=0.2, write_backoff_seconds=0.1, status_interval_seconds=0.1
            ),
            lambda: 1,
        )
        deadline = time.monotonic() + 4.0

        async def worker() -> None:
            while time.monotonic() < deadline:
                coordinator.heartbeat(HeartbeatRequest(worker="a"), time.monotonic())
                await asyncio.sleep(0.1)

        def make_source(_: Source) -> HungSource:
            return source

        driving = drive(
            loop,
            writer,
            make_source,
            Timeouts(listing=1.0),
            stopped=lambda: time.monotonic() > deadline,
        )
        return (await asyncio.gather(worker(), driving))[1]

    consumer = asyncio.run(run())  # returned when told to stop: nothing ended it before
    assert source.calls >= 3, "listed again after each timeout"
    assert api.status["leases"]["s0"]["owner"] == "a", "the grant was saved after the failures"
    degraded = next(c for c in api.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True"
    assert "listing shards timed out after 1s" in degraded["message"]
    assert consumer.coordinator.persisted_version == consumer.coordinator.version


@pytest.mark.parametrize("error", [StatusUnavailable("HTTP 500"), StatusInvalid("422")])
def test_status_writer_raises_what_the_loop_retries(error: Exception) -> None:
    api = FlakyApi([error])
    writer = StatusWriter(api, "n", "c", holder="test")
    writer.adopt(api.get())
    with pytest.raises(type(error)):
        writer.write({"leases": {}})
    writer.write({"leases": {}})
    assert api.writes == 1


def test_a_write_that_landed_without_an_answer_is_recognised_as_ours() -> None:
    """A timeout after the write landed: the next write conflicts, and the stored table
    is the one we tried to write, so it is ours, not another writer's."""

    class LostAnswer(FlakyApi):
        def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
            written = super().replace_status(body)
            if self.writes == 1:
                raise StatusUnavailable("timed out after the write landed")
            return written

    api = LostAnswer([])
    writer = StatusWriter(api, "n", "c", holder="test")
    writer.adopt(api.get())
    first = {"leases": {"s0": {"owner": "a", "epoch": 1, "state": "Active"}}}
    with pytest.raises(StatusUnavailable):
        writer.write(first)
    writer.write({"leases": {"s0": {"owner": "a", "epoch": 1, "checkpoint": "5"}}})
    assert api.status["leases"]["s0"]["checkpoint"] == "5", "no StaleState, no adopt"


def test_the_runner_rebuilds_its_source_when_the_endpoint_changes() -> None:
    """11.12: spec.source was read once. The stream cannot change (the CRD refuses it);
    the endpoint can, and the next listing goes to the new one."""
    api = FlakyApi([])
    built: list[str | None] = []

    async def run() -> None:
        coordinator = LeaseCoordinator(
            spec(), DurableState(), now=time.monotonic(), created=CREATED
        )
        writer = StatusWriter(api, "n", "c", holder="test")
        writer.adopt(api.get())
        loop = ConsumerLoop("c", coordinator, LoopSettings(shard_sync_seconds=0.1), lambda: 1)
        deadline = time.monotonic() + 1.5

        def make_source(source: Source) -> HungSource:
            _, spec = selected(source)
            assert isinstance(spec, KinesisSpec)
            built.append(spec.endpoint_url)
            return HungSource()

        async def edit() -> None:
            await asyncio.sleep(0.5)
            moved = spec(source={"kinesis": {"streamName": "s", "endpointURL": "http://vpce"}})
            coordinator.update_spec(moved)

        await asyncio.gather(
            edit(),
            drive(loop, writer, make_source, Timeouts(), lambda: time.monotonic() > deadline),
        )

    asyncio.run(run())
    assert built == [None, "http://vpce"]


def test_a_blocked_shard_is_degraded_and_passed_over_records_are_events() -> None:
    """13.2: Degraded names a shard its failing batch blocks (policy block); records a
    worker skipped or dead-lettered become Warning Events."""
    loop = make_loop()
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 0.0)
    coordinator = loop.coordinator
    fence = loop.write_due(0.0)
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    loop.step(0.0)
    write = loop.write_due(1.0)
    assert write is not None
    loop.write_succeeded(write, 1.0)
    epochs = {sid: lease.epoch for sid, lease in coordinator.leases.items()}
    failing = {"attempts": 7, "seconds": 42.0, "error": "ValueError: bad", "blocked": True}
    skipped = {
        "action": "skip",
        "firstSequence": "5",
        "lastSequence": "9",
        "count": 3,
        "error": "ValueError: bad",
    }
    coordinator.heartbeat(
        HeartbeatRequest.model_validate(
            {
                "worker": "w",
                "held": [
                    {"shardId": "s0", "epoch": epochs["s0"], "failing": failing},
                    {"shardId": "s1", "epoch": epochs["s1"], "passedOver": [skipped]},
                ],
            }
        ),
        1.0,
    )
    loop.step(1.0)
    assert loop.write_due(2.0) is not None
    status, message = condition(loop, "Degraded")
    assert status == "True"
    assert "s0 blocked on w: 7 attempts in 42s: ValueError: bad" in message
    # Not Ready while a record blocks its shard (issue 25), and Stalled for kstatus.
    ready = next(c for c in loop.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "ShardBlocked")
    assert ready.message.startswith("s0 blocked on w")
    assert condition(loop, "Stalled")[0] == "True"
    events = loop.take_events()
    assert ("Warning", "RecordsSkipped") in [(e.type, e.reason) for e in events]
    assert any("s1: 3 records skipped by w (5..9)" in e.message for e in events)


def test_a_new_stream_waits_for_the_old_streams_tail_and_says_so() -> None:
    """A DynamoDB table's stream disabled and enabled again: the new stream's first
    shard waits (not a parent) for the old stream's last one, with an Event, and starts
    once that one is finished."""
    loop = make_loop()
    coordinator = loop.coordinator
    fence = loop.write_due(0.0)  # the term's first write: nothing is decided before it
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("old")], 0.0)
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    loop.step(0.0)
    loop.take_events()
    loop.sync_started(1.0)
    loop.sync_succeeded([Shard("old", closed=True), Shard("new", waits_for=("old",))], 1.0)
    said = "a new stream's new starts once old is read to its end"
    assert ("Normal", "StreamReplaced", said) in loop.take_events()
    loop.step(1.0)
    assert "new" not in coordinator.leases or coordinator.leases["new"].owner is None
    coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id="old", epoch=1, sequence_number=SHARD_END)
    )
    loop.step(2.0)
    assert coordinator.leases["new"].owner == "a"
    assert coordinator.status_leases()["new"].parents == [], "no wire or status change"


def test_a_hung_scale_call_stops_neither_the_engine_nor_the_status() -> None:
    """Issue 22.5: the autoscaler's scale was awaited inline: while it hung there were no
    expiries, grants or status writes, and when it returned the same iteration wrote
    status after the term had ended. It is a job with a timeout now."""
    import threading

    api = FlakyApi([])
    release = threading.Event()
    scaling_started = threading.Event()
    scaled: list[int] = []

    def hung_scale(replicas: int) -> None:
        scaling_started.set()
        release.wait(10)
        scaled.append(replicas)

    async def run() -> None:
        autoscaling = {
            "minReplicas": 0,
            "maxReplicas": 4,
            "targetLagSeconds": 1,
            "scaleUpStabilizationSeconds": 0,
        }
        coordinator = LeaseCoordinator(
            spec(autoscaling=autoscaling),
            DurableState(),
            now=time.monotonic(),
            created=CREATED,
            desired_replicas=0,
        )
        writer = StatusWriter(api, "n", "c", holder="test")
        writer.adopt(api.get())
        settings = LoopSettings(shard_sync_seconds=0.1, status_interval_seconds=0.1)
        loop = ConsumerLoop("c", coordinator, settings, lambda: 1, Autoscaler(0))
        deadline = time.monotonic() + 3.0
        consumer = ManagedConsumer("n", "c", loop)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            jobs = ThreadJobs(pool, consumer.wake)
            driver = ConsumerDriver(
                "n",
                "c",
                loop,
                lambda _: HungSource(),
                writer,
                jobs,
                time.monotonic,
                lambda e: None,
                Timeouts(scale=1.0),
                scale=hung_scale,
            )

            async def worker() -> None:  # far behind: the autoscaler wants more workers
                while time.monotonic() < deadline:
                    lease = coordinator.leases.get("s0")
                    held = []
                    if lease is not None and lease.owner == "a":
                        held = [
                            {"shardId": "s0", "epoch": lease.epoch, "millisBehindLatest": 60_000}
                        ]
                    request = HeartbeatRequest.model_validate({"worker": "a", "held": held})
                    coordinator.heartbeat(request, time.monotonic())
                    if scaling_started.is_set():  # a newcomer while scaling hangs
                        coordinator.heartbeat(HeartbeatRequest(worker="b"), time.monotonic())
                    await asyncio.sleep(0.1)

            await asyncio.gather(
                worker(), run_consumer(consumer, driver, jobs, lambda: time.monotonic() > deadline)
            )
            release.set()

    asyncio.run(run())
    assert scaling_started.is_set(), "the autoscaler asked for more workers"
    assert "b" in api.status["workers"], "the status kept being written while scaling hung"
    assert api.status["leases"]["s0"]["owner"] == "a"


def test_many_abandoned_writes_landing_late_are_still_ours() -> None:
    """Adversarial review: with six writes abandoned by their timeouts, the oldest one
    landing late was no longer among the remembered attempts and was taken for another
    writer's table (StaleState: serving stopped, a checkpoint went back in memory).
    A table stored under our own term is ours, however many attempts are out."""

    class Late(FlakyApi):
        def __init__(self) -> None:
            super().__init__([])
            self.held: list[dict[str, Any]] = []

        def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
            if len(self.held) < 6:  # the apiserver is slow: these land later
                self.held.append(body)
                raise StatusUnavailable("timed out")
            return super().replace_status(body)

    api = Late()
    writer = StatusWriter(api, "n", "c", holder="p1")
    writer.adopt(api.get())
    for checkpoint in range(10, 70, 10):  # six attempts, each abandoned by its timeout
        table = {"s0": {"owner": "a", "epoch": 1, "checkpoint": str(checkpoint)}}
        with pytest.raises(StatusUnavailable):
            writer.write({"leases": table})
    oldest = api.held[0]
    FlakyApi.replace_status(api, oldest)  # the oldest lands now
    writer.write({"leases": {"s0": {"owner": "a", "epoch": 1, "checkpoint": "70"}}})
    assert api.status["leases"]["s0"]["checkpoint"] == "70"


def reasons(loop: ConsumerLoop) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in loop.conditions}


def test_ready_stalled_and_children_applied_follow_the_workers_objects() -> None:
    """Ready stayed True while the workers' Deployment could not be applied (issue 25):
    now Ready and ChildrenApplied say so, with the apiserver's words, and Stalled (kstatus)
    is True; Reconciling is True until the objects are known applied."""
    loop = make_loop()
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    fence = loop.write_due(0.0)
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    loop.coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    loop.step(0.0)
    write = loop.write_due(1.0)
    assert write is not None
    loop.write_succeeded(write, 1.0)
    assert reasons(loop)["ChildrenApplied"] == ("False", "Pending")
    assert reasons(loop)["Reconciling"] == ("True", "ApplyingChildren")

    refused = "Deployment c-workers was refused (422): metadata.name: must be no more than 63"
    loop.children_applied(refused)
    write = loop.write_due(2.0)
    assert write is not None
    loop.write_succeeded(write, 2.0)
    assert reasons(loop)["Ready"] == ("False", "ChildrenNotApplied")
    assert reasons(loop)["ChildrenApplied"] == ("False", "Refused")
    assert reasons(loop)["Stalled"] == ("True", "ChildrenNotApplied")
    assert condition(loop, "Ready")[1] == refused

    loop.children_applied(None)
    write = loop.write_due(3.0)
    assert write is not None
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned")
    assert reasons(loop)["ChildrenApplied"] == ("True", "Applied")
    assert reasons(loop)["Stalled"][0] == "False"
    assert reasons(loop)["Reconciling"][0] == "False"


def test_a_conflict_from_a_metadata_patch_keeps_the_table_a_new_term_starts_from() -> None:
    """kopf patches a new object's metadata (finalizer, annotations) while its first
    status write is under way: the conflict is no other writer's table. The writer took
    it for one and adopted the empty stored status, dropping the lease table a new
    object resumes from (kept checkpoints, issue 25): everything was replayed."""

    class MetadataPatched(FlakyApi):
        def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
            if body["metadata"]["resourceVersion"] == "1":
                self.version += 1  # kopf's patch landed first
                raise Conflict("the object has been modified")
            return super().replace_status(body)

    api = MetadataPatched([])
    writer = StatusWriter(api, "n", "c", holder="test")
    writer.adopt(api.get())
    kept = {"leases": {"s0": {"epoch": 3, "checkpoint": "4967", "state": "Released"}}}
    writer.write(kept)
    assert api.status["leases"] == kept["leases"], "our table, not the empty one stored"

    # A table that did land meanwhile (an older term's late write) is still adopted.
    late = FlakyApi([])
    writer = StatusWriter(late, "n", "c", holder="new")
    writer.adopt(late.get())
    late.status = {
        "leases": {"s0": {"owner": "w1", "epoch": 1}},
        "term": {"number": 0, "holder": "old"},
    }
    late.failures = [Conflict("the object has been modified")]
    with pytest.raises(StaleState):
        writer.write(kept)


def test_a_failed_apply_after_an_applied_one_is_not_shown_applied() -> None:
    """Found by review: an apply that failed for a passing reason (a webhook down, 500)
    left the last outcome, Applied, in status for the new spec."""
    registry = Registry(clock=lambda: 0.0)
    loop = make_loop()
    registry.add(ManagedConsumer("ns", "c", loop))
    registry.children_applied("ns", "c", None)
    assert loop.children.known
    registry.children_failed("ns", "c", "HTTP 500: failed calling webhook")
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    write = loop.write_due(0.0)
    assert write is not None
    assert reasons(loop)["ChildrenApplied"] == ("False", "Pending")
    assert reasons(loop)["Reconciling"] == ("True", "ApplyingChildren")
    assert "HTTP 500: failed calling webhook" in condition(loop, "ChildrenApplied")[1]
    again = make_loop()  # the loop restarts: the registry still knows
    registry.remove("ns", "c")
    registry.add(ManagedConsumer("ns", "c", again))
    assert not again.children.known
    assert again.children.failed == "HTTP 500: failed calling webhook"


OLD = "arn:aws:kinesis:us-east-1:000000000000:stream/s created 2026-11-01T00:00:00+00:00"
NEW = "arn:aws:kinesis:us-east-1:000000000000:stream/s created 2026-11-20T09:00:00+00:00"


def test_a_stream_created_again_under_its_name_never_gets_the_table() -> None:
    """Kinesis gives a stream deleted and created again the same name, ARN and shard ids.
    Taken for the old one, its shardId-000000000000 was the finished parent of a split,
    so its records were never read (seen on kinesis-local): the listing of another
    stream must not be applied, every worker must hand off, and the status must say so."""
    loop = make_loop()
    coordinator = loop.coordinator
    assert loop.sync_started(0.0), "the first listing says which stream it lists"
    loop.sync_succeeded([Shard("s0", closed=True), Shard("s1", ("s0",))], 0.0, OLD)
    assert coordinator.stream == OLD
    first = loop.write_due(0.0)
    assert first is not None
    assert durable_from_status(first.body).stream == OLD, "saved with the table"
    loop.write_succeeded(first, 0.0)
    coordinator.finished.add("s0")
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    coordinator.step(0.0)
    held = [HeldShard(shard_id="s1", epoch=coordinator.leases["s1"].epoch)]
    coordinator.heartbeat(HeartbeatRequest(worker="a", held=held), 0.1)

    assert not loop.sync_started(10.0), "then only a listing that changed says it"
    loop.sync_succeeded([Shard("s0", closed=True), Shard("s1", ("s0",))], 10.0)
    loop.sync_started(30.0)
    loop.sync_succeeded([Shard("s0")], 30.0, NEW)
    assert [s.id for s in coordinator.shards] == ["s0", "s1"], "the listing is not applied"
    assert "s0" in coordinator.finished
    assert [e.reason for e in loop.events].count("StreamRecreated") == 1
    coordinator.heartbeat(HeartbeatRequest(worker="a", held=held), 30.2)
    coordinator.step(30.5)
    assert coordinator.leases["s1"].state.value == "HandOff", "its worker hands off"
    write = loop.write_due(31.0)
    assert write is not None
    assert condition(loop, "Ready") == ("False", coordinator.replaced_stream())
    assert durable_from_status(write.body).stream == OLD, "the table stays the old one's"
    assert loop.sync_started(40.0), "while another stream is seen, every listing says"
    loop.sync_succeeded([Shard("s0")], 40.0, NEW)
    assert [e.reason for e in loop.events].count("StreamRecreated") == 1, "told once"


class DescribedSource(HungSource):
    def __init__(self, shards: list[Shard]) -> None:
        super().__init__()
        self.shards = shards
        self.described = 0

    def list_shards(self) -> list[Shard]:
        return self.shards

    def incarnation(self) -> str:
        self.described += 1
        return OLD


def test_a_listing_says_which_stream_it_is_when_asked_or_when_the_shards_changed() -> None:
    same = [Shard("s0", sequence_range=("100", None))]
    source = DescribedSource(same)
    assert list_stream(source, False, tuple(same)) == (same, None)
    assert list_stream(source, True, tuple(same)) == (same, OLD)
    # A stream created again: the same ids, another starting sequence number.
    again = (Shard("s0", sequence_range=("900", None)),)
    assert list_stream(source, False, again) == (same, OLD)
    assert source.described == 2


def test_a_stalled_consumer_stays_stalled_when_another_term_takes_it_over() -> None:
    """Found by the adversarial review: the other stream was known only in memory, so
    an operator restart or a new leader served the old table again until its first
    listing, and for as long as its listings failed (DescribeStreamSummary throttled):
    the worker got its shard at the old stream's checkpoint, on the new stream."""
    loop = make_loop()
    coordinator = loop.coordinator
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0, OLD)
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    coordinator.step(0.0)
    epoch = coordinator.leases["s0"].epoch
    coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id="s0", epoch=epoch, sequence_number="42")
    )
    loop.sync_started(10.0)
    loop.sync_succeeded([Shard("s0")], 10.0, NEW)
    coordinator.step(10.5)
    coordinator.checkpoint(CheckpointRequest(worker="a", shard_id="s0", epoch=epoch, release=True))
    coordinator.step(11.0)
    assert coordinator.leases["s0"].owner is None
    write = loop.write_due(12.0)
    assert write is not None
    stored = durable_from_status(write.body)
    assert stored.stream == OLD, "the table stays the old one's"

    again = LeaseCoordinator(spec(), stored, now=100.0, created=CREATED)
    taken = ConsumerLoop("c", again, LoopSettings(shard_sync_seconds=10.0), lambda: 1)
    fence = taken.write_due(100.0)
    assert fence is not None
    taken.write_succeeded(fence, 100.0)
    assert taken.sync_started(100.0), "every listing says which stream it lists"
    taken.sync_failed("LimitExceededException: Rate exceeded", 101.0)
    for now in range(101, 160, 2):
        answer = again.heartbeat(HeartbeatRequest(worker="b"), float(now))
        assert answer.assignments == [], "nothing is read from the old table"
        taken.step(now + 0.5)
        if (write := taken.write_due(now + 1.0)) is not None:
            taken.write_succeeded(write, now + 1.0)
    assert again.leases["s0"].owner is None
    assert condition(taken, "Ready") == ("False", again.replaced_stream())

    adopting = make_loop()
    adopting.sync_started(0.0)
    adopting.sync_succeeded([Shard("s0")], 0.0, OLD)
    adopting.write_stale(stored, 1.0)
    assert adopting.coordinator.stream_replaced == NEW, "another writer's stall is adopted"


def test_a_stalled_consumer_is_not_scaled_up_for_a_backlog_nobody_may_read() -> None:
    """Found by the adversarial review: stopped for a stream created again, the consumer
    is as if paused, but the lag autoscaler went on scaling it up to maxReplicas for the
    backlog it measures there: pods started that can be given nothing."""
    loop = make_loop(autoscaling={"minReplicas": 0, "maxReplicas": 4, "targetLagSeconds": 10})
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 0.0, OLD)
    loop.sync_started(10.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 10.0, NEW)
    loop.coordinator.set_backlog({"s0": 50_000, "s1": 30_000}, 20.0)
    assert loop.autoscale(21.0) is None


def test_a_stalled_consumer_is_not_shown_reconciling_towards_owning_its_shards() -> None:
    """Found by the adversarial review: stopped for a stream created again, its shards are
    unowned on purpose (as a paused one's), yet Reconciling said ShardsUnassigned: kstatus
    reads Reconciling first, so Flux or Argo showed it in progress for ever, not failed."""
    registry = Registry(clock=lambda: 0.0)
    loop = make_loop()
    registry.add(ManagedConsumer("ns", "c", loop))
    registry.children_applied("ns", "c", None)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 0.0, OLD)
    first = loop.write_due(0.0)
    assert first is not None
    loop.write_succeeded(first, 0.0)
    loop.sync_started(10.0)
    loop.sync_succeeded([Shard("s0"), Shard("s1")], 10.0, NEW)
    loop.coordinator.heartbeat(HeartbeatRequest(worker="a"), 11.0)
    loop.step(11.5)
    write = loop.write_due(60.0)
    assert write is not None
    assert reasons(loop)["Stalled"] == ("True", "StreamRecreated")
    assert reasons(loop)["Reconciling"] == ("False", "Done")


def test_a_stalled_consumer_lists_its_stream_no_more_often_than_a_healthy_one() -> None:
    """Found by the adversarial review: stopped for a stream created again after a
    restart (no listing applied since), a finished shard whose children it never listed
    made it list and describe the stream every second for ever: DescribeStreamSummary
    allows 20 calls a second per account, shared with every other consumer's."""
    status = {
        "leases": {"s0": {"epoch": 3, "state": "Finished", "checkpoint": SHARD_END}},
        "finishedShards": ["s0"],
        "stream": OLD,
        "streamReplaced": NEW,
    }
    coordinator = LeaseCoordinator(spec(), durable_from_status(status), 0.0, created=CREATED)
    loop = ConsumerLoop("c", coordinator, LoopSettings(shard_sync_seconds=10.0), lambda: 1)
    listings = 0
    for tick in range(240):
        now = tick / 4
        if loop.sync_due(now):
            listings += 1
            assert loop.sync_started(now)
            loop.sync_succeeded([Shard("s0"), Shard("s1")], now + 0.1, NEW)
    assert listings <= 6


def test_a_stalled_consumer_assigns_nothing_before_its_first_step() -> None:
    """Found by the adversarial review: a new term of a stopped consumer, its fence just
    landed, answered a restarted owner's heartbeat with its lease at the old stream's
    checkpoint; the hand-off came only at the next step, after a batch of the new
    stream's records was read from there."""
    status = {
        "leases": {"s1": {"owner": "b", "epoch": 2, "state": "Active", "checkpoint": "7"}},
        "stream": OLD,
        "streamReplaced": NEW,
    }
    coordinator = LeaseCoordinator(spec(), durable_from_status(status), 0.0, created=CREATED)
    loop = ConsumerLoop("c", coordinator, LoopSettings(), lambda: 1)
    fence = loop.write_due(0.0)
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    assert coordinator.heartbeat(HeartbeatRequest(worker="b"), 0.5).assignments == []
    loop.step(1.0)
    answer = coordinator.heartbeat(HeartbeatRequest(worker="b"), 1.5)
    assert (answer.assignments, [r.reason.value for r in answer.revocations]) == ([], ["handoff"])


def test_a_paused_consumer_whose_stream_was_created_again_is_not_ready() -> None:
    """Paused reads Ready=True; a paused consumer stopped for good must not."""
    loop = make_loop(paused=True)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0, OLD)
    loop.sync_started(10.0)
    loop.sync_succeeded([Shard("s0")], 10.0, NEW)
    assert loop.write_due(10.0) is not None
    status, _ = condition(loop, "Ready")
    by_type = {c.type: c for c in loop.conditions}
    assert (status, by_type["Ready"].reason) == ("False", "StreamRecreated")
