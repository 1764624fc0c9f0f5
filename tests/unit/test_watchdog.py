"""The stuck-shard watchdog (docs/failure-policy.md#stuck-shards): the decision
(`core.watchdog`), the engine's release of a withdrawn lease only once its owner's fence
has closed (`core.leases`), and the coordinator's side of the protocol: the owner told
LOST and renewed nothing, its late checkpoints refused, one withdrawal per checkpoint."""

from __future__ import annotations

import pytest

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState, expiry_grace
from streamconsumer.core.leases import (
    ACTIVE,
    CheckpointRefused,
    EngineSettings,
    Grant,
    Reclaim,
    ShardLease,
    Withdrawn,
    WorkerLiveness,
    plan,
)
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.core.watchdog import Seen, Watchdog
from streamconsumer.models import (
    CheckpointRequest,
    HeartbeatRequest,
    HeldShard,
    RevocationReason,
    StartPositionType,
)
from streamconsumer.models.api import Failing
from testbed.specs import consumer_spec

from .moments import CREATED

LEASE = 10.0
STUCK = 60.0


# --- the decision ------------------------------------------------------------------------


def seen(checkpoint: str | None = "5", **fields: object) -> dict[str, Seen]:
    return {"s0": Seen("a", 1, checkpoint, **fields)}  # type: ignore[arg-type]


def test_records_waiting_at_an_unmoved_position_for_the_time_make_a_shard_stuck() -> None:
    dog = Watchdog()
    assert dog.judge(seen(behind=True), 0.0, STUCK) == []
    assert dog.judge(seen(behind=True), 59.0, STUCK) == []
    [stuck] = dog.judge(seen(behind=False), 60.0, STUCK)  # seen waiting at 0: still waits
    assert (stuck.shard_id, stuck.owner, stuck.revoke, stuck.new) == ("s0", "a", True, True)
    assert "records have waited 60s at checkpoint 5" in stuck.describe()


def test_the_clock_starts_when_records_are_first_seen_not_when_the_shard_last_moved() -> None:
    """A quiet shard whose first record in an hour arrives is not stuck."""
    dog = Watchdog()
    dog.judge(seen(), 0.0, STUCK)
    assert dog.judge(seen(), 3600.0, STUCK) == []  # an idle shard: nothing waits
    assert dog.judge(seen(behind=True), 3601.0, STUCK) == []
    assert dog.judge(seen(behind=True), 3601.0 + STUCK - 1, STUCK) == []
    assert len(dog.judge(seen(behind=True), 3601.0 + STUCK, STUCK)) == 1


def test_any_progress_starts_the_watch_over() -> None:
    dog = Watchdog()
    dog.judge(seen(behind=True), 0.0, STUCK)
    assert dog.judge(seen(behind=True, processed="7"), 50.0, STUCK) == []  # processed more
    assert dog.judge(seen(behind=True, processed="7"), 100.0, STUCK) == []
    assert dog.judge(seen("7", behind=True, processed="7"), 120.0, STUCK) == []  # checkpointed
    assert dog.judge(seen("7", behind=True, processed="7"), 179.0, STUCK) == []
    assert len(dog.judge(seen("7", behind=True, processed="7"), 180.0, STUCK)) == 1


def test_a_failing_shard_is_the_failure_policys_not_the_watchdogs() -> None:
    dog = Watchdog()
    dog.judge(seen(behind=True, failing=True), 0.0, STUCK)
    assert dog.judge(seen(behind=True, failing=True), 600.0, STUCK) == []


def test_off_when_zero() -> None:
    dog = Watchdog()
    dog.judge(seen(behind=True), 0.0, 0)
    assert dog.judge(seen(behind=True), 10_000.0, 0) == []


def test_a_probe_that_finds_records_counts_only_for_the_position_it_probed() -> None:
    dog = Watchdog()
    dog.judge(seen(), 0.0, STUCK)
    assert dog.quiet(5.0, 10.0) == []
    assert dog.quiet(10.0, 10.0) == ["s0"]
    dog.records_wait("s0", ("a", 1, "4", None), 10.0)  # an older position: says nothing
    assert dog.judge(seen(), 100.0, STUCK) == []
    dog.records_wait("s0", ("a", 1, "5", None), 100.0)
    assert dog.quiet(100.0, 10.0) == []  # seen waiting: no need to probe again
    assert dog.judge(seen(), 159.0, STUCK) == []
    assert len(dog.judge(seen(), 160.0, STUCK)) == 1


def test_withdrawn_once_per_checkpoint_and_reported_while_it_stays_stuck() -> None:
    dog = Watchdog()
    dog.judge(seen(behind=True), 0.0, STUCK)
    [first] = dog.judge(seen(behind=True), 60.0, STUCK)
    assert first.revoke
    assert first.new
    [again] = dog.judge(seen(behind=True), 61.0, STUCK)
    assert not again.revoke
    assert not again.new
    # Granted again (epoch 2, another worker), stuck again at the same checkpoint.
    regranted = {"s0": Seen("b", 2, "5", behind=True)}
    dog.judge(regranted, 100.0, STUCK)
    [stuck] = dog.judge(regranted, 160.0, STUCK)
    assert stuck.new
    assert not stuck.revoke
    # Once the checkpoint moved, a later stall may be withdrawn again.
    moved = {"s0": Seen("b", 2, "9", behind=True)}
    dog.judge(moved, 200.0, STUCK)
    [later] = dog.judge(moved, 260.0, STUCK)
    assert later.revoke


# --- the engine --------------------------------------------------------------------------


def test_a_withdrawn_lease_is_released_only_after_its_owners_fence_has_closed() -> None:
    shards = [Shard("s0"), Shard("s1")]
    leases = {
        "s0": ShardLease("s0", "a", 1, "5", ACTIVE),
        "s1": ShardLease("s1", "b", 1, "3", ACTIVE),
    }
    workers = [WorkerLiveness("a", 100.0), WorkerLiveness("b", 100.0)]
    withdrawn = {"s0": Withdrawn("a", 1, closes_at=40.0)}
    settings = EngineSettings()
    early = plan(shards, leases, workers, 39.0, settings, withdrawn=withdrawn)
    assert early.actions == []
    assert early.leases == leases
    # A worker joins: balancing would move s0, but nothing touches a withdrawn lease.
    joined = [*workers, WorkerLiveness("c", 100.0)]
    assert plan(shards, leases, joined, 39.0, settings, withdrawn=withdrawn).actions == []
    late = plan(shards, leases, workers, 40.5, settings, withdrawn=withdrawn)
    assert late.actions[0] == Reclaim("s0", "a", 1)
    [grant] = [a for a in late.actions if isinstance(a, Grant)]
    assert (grant.shard_id, grant.epoch) == ("s0", 2)  # a new epoch fences the old owner
    assert late.leases["s0"].checkpoint == "5"  # from its checkpoint: nothing skipped


def test_a_withdrawal_of_a_lease_that_moved_on_does_nothing() -> None:
    shards = [Shard("s0")]
    leases = {"s0": ShardLease("s0", "b", 2, "5", ACTIVE)}
    result = plan(
        shards,
        leases,
        [WorkerLiveness("b", 100.0)],
        50.0,
        EngineSettings(),
        withdrawn={"s0": Withdrawn("a", 1, 40.0)},
    )
    assert result.actions == []
    assert result.leases == leases


# --- the coordinator ---------------------------------------------------------------------


def beat(coordinator: LeaseCoordinator, worker: str, now: float, *held: HeldShard):  # type: ignore[no-untyped-def]
    return coordinator.heartbeat(HeartbeatRequest(worker=worker, held=list(held)), now)


def held(shard: str, epoch: int, behind: int | None = 1000, seq: str | None = None) -> HeldShard:
    return HeldShard(shard_id=shard, epoch=epoch, millis_behind_latest=behind, sequence_number=seq)


def one_shard(stuck_seconds: float = STUCK) -> LeaseCoordinator:
    spec = consumer_spec(
        leases={"durationSeconds": LEASE, "stuckShardSeconds": stuck_seconds},
    )
    coordinator = LeaseCoordinator(spec, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    coordinator.persisted(coordinator.snapshot(0.0), coordinator.version)
    [assignment] = beat(coordinator, "a", 0.1).assignments
    assert assignment.epoch == 1
    coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id="s0", epoch=1, sequence_number="5")
    )
    return coordinator


def test_a_stuck_shard_is_reported_then_withdrawn_and_granted_again_once() -> None:
    coordinator = one_shard()
    beat(coordinator, "a", 1.0, held("s0", 1, seq="5"))
    coordinator.step(1.0)
    assert coordinator.watch.stuck == []
    beat(coordinator, "a", 30.0, held("s0", 1, seq="5"))
    coordinator.step(30.0)
    last_renewal = 60.0
    beat(coordinator, "a", last_renewal, held("s0", 1, seq="5"))
    coordinator.step(61.0)  # records seen waiting at 1.0, 60 s ago
    [stuck] = coordinator.watch.stuck
    assert stuck.revoke
    [note] = coordinator.watch.take_notes()
    assert note.shard_id == "s0"
    assert "s0 stuck on a (epoch 1)" in coordinator.watch.described()[0]
    # From now on a hears LOST for the shard and its fence is renewed no more...
    answer = beat(coordinator, "a", 62.0, held("s0", 1, seq="5"))
    assert [(r.shard_id, r.reason) for r in answer.revocations] == [("s0", RevocationReason.LOST)]
    # ...and its checkpoints are refused, though the status still names it owner.
    with pytest.raises(CheckpointRefused) as refused:
        coordinator.checkpoint(
            CheckpointRequest(worker="a", shard_id="s0", epoch=1, sequence_number="6")
        )
    assert refused.value.lease_lost
    assert coordinator.leases["s0"].owner == "a"
    # Nothing moves it until a's fence for it has closed (last promise + grace)...
    closes = last_renewal + LEASE + expiry_grace(LEASE)
    assert coordinator.step(closes - 0.5) == []
    assert coordinator.leases["s0"].owner == "a"
    # ...then it is released at its checkpoint and granted again, under a new epoch.
    beat(coordinator, "b", closes - 0.2)
    actions = coordinator.step(closes + 0.1)
    assert Reclaim("s0", "a", 1) in actions
    lease = coordinator.leases["s0"]
    assert (lease.epoch, lease.checkpoint, lease.state) == (2, "5", ACTIVE)
    coordinator.persisted(coordinator.snapshot(closes), coordinator.version)
    owner = lease.owner
    assert owner is not None
    [regrant] = beat(coordinator, owner, closes + 0.2).assignments
    assert regrant.start.type is StartPositionType.AFTER_SEQUENCE_NUMBER
    assert regrant.start.sequence_number == "5"
    # The old epoch stays fenced: a wedged thread that wakes up later is refused.
    with pytest.raises(CheckpointRefused) as refused:
        coordinator.checkpoint(
            CheckpointRequest(worker="a", shard_id="s0", epoch=1, sequence_number="6")
        )
    assert refused.value.lease_lost
    # Stuck again under its new owner at the same checkpoint: reported, not withdrawn.
    t = closes + 1.0
    beat(coordinator, owner, t, held("s0", 2, seq="5"))
    coordinator.step(t)
    beat(coordinator, owner, t + STUCK, held("s0", 2, seq="5"))
    coordinator.step(t + STUCK + 0.5)
    [again] = coordinator.watch.stuck
    assert not again.revoke
    assert coordinator.watch.withdrawn == {}
    for later in (t + STUCK + LEASE, t + STUCK + 2 * LEASE, t + STUCK + 3 * LEASE):
        beat(coordinator, owner, later, held("s0", 2, seq="5"))
        assert coordinator.step(later) == []
    assert coordinator.leases["s0"].owner == owner


def test_a_shard_that_moves_or_fails_is_never_stuck() -> None:
    coordinator = one_shard()
    for t, seq in ((1.0, "6"), (30.0, "7"), (61.0, "8"), (90.0, "9"), (130.0, "10")):
        beat(coordinator, "a", t, held("s0", 1, seq=seq))
        coordinator.step(t)
    assert coordinator.watch.stuck == []
    failing = HeldShard(
        shard_id="s0",
        epoch=1,
        millis_behind_latest=1000,
        sequence_number="10",
        failing=Failing(attempts=5, seconds=100.0, error="ValueError", blocked=True),
    )
    for t in (131.0, 200.0, 300.0):
        beat(coordinator, "a", t, failing)
        coordinator.step(t)
    assert coordinator.watch.stuck == []
    assert coordinator.watch.withdrawn == {}


def test_the_watchdog_switched_off_withdraws_nothing() -> None:
    coordinator = one_shard(stuck_seconds=0)
    for t in (1.0, 100.0, 1000.0):
        beat(coordinator, "a", t, held("s0", 1, seq="5"))
        coordinator.step(t)
    assert coordinator.watch.stuck == []
    assert coordinator.watch.withdrawn == {}
    assert coordinator.watch_probes(1000.0, 10.0, 32) == []


def test_an_owner_reporting_no_lag_is_probed_from_what_it_processed() -> None:
    coordinator = one_shard()
    beat(coordinator, "a", 1.0, held("s0", 1, behind=0, seq="7"))
    coordinator.step(1.0)
    assert coordinator.watch_probes(5.0, 10.0, 32) == []
    [(shard, start)] = coordinator.watch_probes(11.0, 10.0, 32)
    assert shard == "s0"
    assert start.sequence_number == "7"
    coordinator.watch.probed({"s0": 250}, 12.0)
    beat(coordinator, "a", 40.0, held("s0", 1, behind=0, seq="7"))
    beat(coordinator, "a", 70.0, held("s0", 1, behind=0, seq="7"))
    coordinator.step(71.0)
    assert coordinator.watch.stuck == []
    coordinator.step(72.0)
    assert [s.shard_id for s in coordinator.watch.stuck] == ["s0"]
    assert coordinator.leases["s0"].state is ACTIVE  # withdrawn, waiting for the fence
    assert "s0" in coordinator.watch.withdrawn


def test_a_shard_read_to_its_end_is_never_probed() -> None:
    """Found by the soak: a shard watched while owned, then checkpointed at SHARD_END
    (finished) before the next step judged it, was probed from "SHARD_END" as if that
    were a sequence number, and the consumer's loop raised."""
    coordinator = one_shard()
    coordinator.set_shards([Shard("s0", closed=True), Shard("s1", parents=("s0",))])
    beat(coordinator, "a", 1.0, held("s0", 1, behind=0))
    coordinator.step(1.0)  # watched now, at its position
    coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id="s0", epoch=1, sequence_number=SHARD_END)
    )
    assert coordinator.watch_probes(60.0, 10.0, 32) == []
