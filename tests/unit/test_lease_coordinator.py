"""The operator's protocol state for one consumer: heartbeats, grants, hand-offs and
fenced checkpoints, driven without I/O."""

from __future__ import annotations

import pytest

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.notes import MAX_PENDING_NOTES
from streamconsumer.controller.leases.state import DurableState, durable_from_status
from streamconsumer.core.leases import (
    ACTIVE,
    FINISHED,
    RELEASED,
    CheckpointDeferred,
    CheckpointRefused,
    ShardLease,
)
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import (
    CheckpointRequest,
    HeartbeatRequest,
    HeldShard,
    RevocationReason,
    StartPositionType,
)
from streamconsumer.models.api import MAX_HELD_SHARDS, Failing, PassedOver
from streamconsumer.models.resource import ResetPosition, ResetRequest
from testbed.specs import consumer_spec

from .moments import CREATED

SPEC = consumer_spec(lease_seconds=10)


def beat(  # type: ignore[no-untyped-def]
    coordinator: LeaseCoordinator,
    worker: str,
    now: float,
    *held: tuple[str, int],
    draining: bool = False,
):
    request = HeartbeatRequest(
        worker=worker, draining=draining, held=[HeldShard(shard_id=s, epoch=e) for s, e in held]
    )
    return coordinator.heartbeat(request, now)


def started(coordinator: LeaseCoordinator) -> LeaseCoordinator:
    coordinator.set_shards([Shard(f"s{i}") for i in range(4)])
    return coordinator


def saved(coordinator: LeaseCoordinator, now: float = 0.0) -> LeaseCoordinator:
    """The status write lands: the coordinator's table is now durable."""
    coordinator.persisted(coordinator.snapshot(now), coordinator.version)
    return coordinator


def fresh() -> LeaseCoordinator:
    return started(LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED))


def test_grant_reaches_the_worker_with_its_start_position() -> None:
    coordinator = fresh()
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    saved(coordinator)
    response = beat(coordinator, "a", 0.1)
    assert sorted(a.shard_id for a in response.assignments) == ["s0", "s1", "s2", "s3"]
    assert all(a.start.type is StartPositionType.TRIM_HORIZON for a in response.assignments)
    assert response.lease_duration_ms == 10_000


def test_handoff_of_a_shard_never_started_is_released_by_its_epoch() -> None:
    coordinator = fresh()
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)  # a gets all four, but has not heard yet
    saved(coordinator)
    beat(coordinator, "b", 0.0)
    coordinator.step(0.0)  # two of them must move to b: hand-off
    response = beat(coordinator, "a", 0.1)  # a never started any
    assert len(response.assignments) == 2
    moving = [(r.shard_id, r.epoch) for r in response.revocations]
    assert len(moving) == 2
    assert all(r.reason is RevocationReason.HANDOFF for r in response.revocations)
    for shard_id, epoch in moving:  # a will never run them under that epoch: it says so
        coordinator.checkpoint(
            CheckpointRequest(worker="a", shard_id=shard_id, epoch=epoch, release=True)
        )
    assert sum(lease.state is RELEASED for lease in coordinator.leases.values()) == 2
    coordinator.step(0.2)
    assert beat(coordinator, "b", 0.3).assignments == [], "not before the grant is saved"
    saved(coordinator)
    assert len(beat(coordinator, "b", 0.3).assignments) == 2


def all_to_a_then_b_joins() -> tuple[LeaseCoordinator, list[tuple[str, int]]]:
    """Worker a runs all four shards (saved) when b joins and half are planned for b:
    the coordinator and what a holds."""
    coordinator = fresh()
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    saved(coordinator)
    held = [(a.shard_id, a.epoch) for a in beat(coordinator, "a", 0.1).assignments]
    beat(coordinator, "b", 0.2)
    coordinator.step(0.2)
    return coordinator, held


def test_handoff_of_a_running_shard_is_revoked_and_then_released() -> None:
    coordinator, held = all_to_a_then_b_joins()
    response = beat(coordinator, "a", 0.3, *held)
    moving = [r.shard_id for r in response.revocations]
    assert len(moving) == 2
    assert all(r.reason is RevocationReason.HANDOFF for r in response.revocations)
    assert beat(coordinator, "b", 0.4).assignments == [], "no grant before release"
    for shard_id in moving:
        epoch = coordinator.leases[shard_id].epoch
        coordinator.checkpoint(
            CheckpointRequest(
                worker="a", shard_id=shard_id, epoch=epoch, sequence_number="7", release=True
            )
        )
    coordinator.step(0.5)
    saved(coordinator)
    granted = beat(coordinator, "b", 0.6).assignments
    assert sorted(a.shard_id for a in granted) == sorted(moving)
    assert all(a.start.sequence_number == "7" for a in granted), "resumes after the checkpoint"


def test_a_release_not_saved_yet_is_never_called_lost_while_its_shard_moves_on() -> None:
    """Found by the soak: a draining worker's release was taken, the shard planned for
    another worker at once, and the releasing worker told LOST (heartbeat) and 409 (its
    repeated release), so it let go of a release only the operator's memory held; the
    leader froze before saving it and the new owner replayed what had been released."""
    coordinator, held = all_to_a_then_b_joins()
    moving = [r.shard_id for r in beat(coordinator, "a", 0.3, *held).revocations]
    shard, epoch = moving[0], dict(held)[moving[0]]
    release = CheckpointRequest(
        worker="a", shard_id=shard, epoch=epoch, sequence_number="7", release=True
    )
    coordinator.checkpoint(release)
    coordinator.step(0.4)
    assert coordinator.leases[shard].epoch > epoch, "planned for b, not saved"

    answer = beat(coordinator, "a", 0.5, *held)
    assert shard not in {
        r.shard_id for r in answer.revocations if r.reason is RevocationReason.LOST
    }
    repeated = coordinator.checkpoint(release)
    assert (repeated.epoch, repeated.checkpoint, repeated.state) == (epoch, "7", RELEASED)

    saved(coordinator, 0.6)  # now the release is durable: the old epoch is lost as ever
    answer = beat(coordinator, "a", 0.7, *held)
    assert (shard, RevocationReason.LOST) in {(r.shard_id, r.reason) for r in answer.revocations}
    with pytest.raises(CheckpointRefused) as refused:
        coordinator.checkpoint(release)
    assert refused.value.lease_lost


def one_shard_run_by_a() -> LeaseCoordinator:
    """Shard s0, granted to worker a under epoch 1 (saved) and heard of by a."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    saved(coordinator)
    beat(coordinator, "a", 0.1)
    return coordinator


def test_an_unsaved_release_outlives_the_next_owners_release_of_its_unsaved_grant() -> None:
    """Found by an adversarial review: a released to c, c drained before its grant was
    saved and released it too; one entry per shard forgot a's release, a was told LOST."""
    coordinator = one_shard_run_by_a()
    beat(coordinator, "c", 0.2)
    beat(coordinator, "a", 0.3, ("s0", 1), draining=True)
    coordinator.step(0.3)
    a_release = CheckpointRequest(
        worker="a", shard_id="s0", epoch=1, sequence_number="7", release=True, wait=True
    )
    coordinator.checkpoint(a_release)
    coordinator.step(0.4)  # granted to c at epoch 2, not saved
    beat(coordinator, "c", 0.5, draining=True)
    coordinator.step(0.5)
    for revoked in beat(coordinator, "c", 0.6, draining=True).revocations:
        coordinator.checkpoint(
            CheckpointRequest(
                worker="c", shard_id="s0", epoch=revoked.epoch, release=True, wait=True
            )
        )
    repeated = coordinator.checkpoint(a_release)
    assert (repeated.epoch, repeated.checkpoint) == (1, "7")
    answer = beat(coordinator, "a", 0.7, ("s0", 1), draining=True)
    assert all(r.reason is not RevocationReason.LOST for r in answer.revocations)


def test_a_repeated_unsaved_release_is_answered_after_a_reset_too() -> None:
    """A reset clears the checkpoint under the same epoch; the repeat of a release it
    did not save yet is still the release, not a 409."""
    coordinator = one_shard_run_by_a()
    coordinator.request_reset(ResetRequest(id="r", to=ResetPosition(timestamp=None)))
    beat(coordinator, "a", 0.2, ("s0", 1), draining=True)
    coordinator.step(0.2)
    release = CheckpointRequest(
        worker="a", shard_id="s0", epoch=1, sequence_number="7", release=True, wait=True
    )
    coordinator.checkpoint(release)
    coordinator.step(0.3)
    assert coordinator.checkpoint(release).checkpoint == "7"


def test_stale_epoch_is_lost_and_fenced() -> None:
    coordinator = fresh()
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    epoch = coordinator.leases["s0"].epoch
    response = beat(coordinator, "a", 0.1, ("s0", epoch + 1))
    assert [(r.shard_id, r.epoch, r.reason) for r in response.revocations] == [
        ("s0", epoch + 1, RevocationReason.LOST)
    ]
    with pytest.raises(CheckpointRefused) as refused:
        coordinator.checkpoint(
            CheckpointRequest(worker="a", shard_id="s0", epoch=epoch + 1, sequence_number="1")
        )
    assert refused.value.lease_lost


def test_restart_waits_a_lease_before_expiring_owners_from_status() -> None:
    status = {"leases": {"s0": {"owner": "a", "epoch": 3, "state": "Active", "checkpoint": "5"}}}
    coordinator = started(
        LeaseCoordinator(SPEC, durable_from_status(status), now=100.0, created=CREATED)
    )
    coordinator.step(100.0 + 13.0)
    assert coordinator.leases["s0"].owner == "a", "within lease + grace of the restart"
    response = beat(coordinator, "a", 113.5, ("s0", 3))
    assert response.revocations == [], "the same lease, same epoch, is renewed"
    assert coordinator.leases["s0"].state is ACTIVE
    coordinator.step(113.5 + 14.0)
    assert coordinator.leases["s0"].owner != "a", "silent too long after the restart"


# --- worker input (issue 22) --------------------------------------------------------------


def owning(coordinator: LeaseCoordinator, worker: str = "a") -> list[tuple[str, int]]:
    beat(coordinator, worker, 0.0)
    coordinator.step(0.0)
    saved(coordinator)
    response = beat(coordinator, worker, 0.1)
    return [(a.shard_id, a.epoch) for a in response.assignments]


def shard_end(coordinator: LeaseCoordinator, shard_id: str = "s0", epoch: int = 1) -> ShardLease:
    return coordinator.checkpoint(
        CheckpointRequest(worker="a", shard_id=shard_id, epoch=epoch, sequence_number=SHARD_END)
    )


def test_shard_end_is_taken_only_for_a_shard_the_listing_shows_closed() -> None:
    """A SHARD_END on a shard the last listing shows open waits for a listing made after
    it (asked for at once); refused only if that listing still shows the shard open."""
    coordinator = fresh()
    owning(coordinator)
    open_shards = [Shard(f"s{i}") for i in range(4)]
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator)
    assert coordinator.listings.relist_wanted, "a fresher listing is asked for"
    coordinator.set_shards(open_shards)
    with pytest.raises(CheckpointRefused) as refused:
        shard_end(coordinator)
    assert not refused.value.lease_lost
    assert coordinator.leases["s0"].state is ACTIVE, "still to be read, and granted"


def test_a_shard_end_read_before_the_operator_lists_the_reshard_is_taken_after_it() -> None:
    """Workers read a split shard's end before the operator's next listing: deferred,
    not refused (a refusal made the worker let the shard go and read it again)."""
    coordinator = fresh()
    owning(coordinator)
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator)
    coordinator.set_shards([Shard("s0", closed=True), *(Shard(f"s{i}") for i in range(1, 4))])
    assert shard_end(coordinator).state is FINISHED


def test_shard_end_waits_for_the_first_listing_after_a_restart() -> None:
    status = {"leases": {"s0": {"owner": "a", "epoch": 3, "state": "Active", "checkpoint": "5"}}}
    coordinator = LeaseCoordinator(SPEC, durable_from_status(status), now=100.0, created=CREATED)
    version = coordinator.version
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator, epoch=3)
    assert coordinator.leases["s0"].state is ACTIVE
    assert coordinator.version == version
    coordinator.set_shards([Shard("s0", closed=True)])
    assert shard_end(coordinator, epoch=3).state is FINISHED


def note(first: str, last: str, count: int, action: str = "skip") -> PassedOver:
    return PassedOver.model_validate(
        {
            "action": action,
            "firstSequence": first,
            "lastSequence": last,
            "count": count,
            "error": "bad",
        }
    )


def test_passed_over_notes_count_only_for_owned_shards_added_up_and_capped() -> None:
    """Issue 22.13: one heartbeat of notes for shards the worker did not own queued
    30,000 Warning Events."""
    coordinator = fresh()
    held = owning(coordinator)
    (shard_id, epoch), *_ = held
    flood = [note(str(i), str(i), 1) for i in range(1, 101)]
    request = HeartbeatRequest(
        worker="a",
        held=[
            HeldShard(shard_id=shard_id, epoch=epoch, passed_over=flood),
            HeldShard(shard_id="s9", epoch=1, passed_over=flood),  # not a shard of a
            HeldShard(shard_id=held[1][0], epoch=epoch + 1, passed_over=flood),  # stale
        ],
    )
    coordinator.heartbeat(request, 0.2)
    coordinator.heartbeat(request, 0.3)
    (queued,) = coordinator.passed_over.pending
    assert (queued.shard_id, queued.note.count) == (shard_id, 200)
    assert (queued.note.first_sequence, queued.note.last_sequence) == ("1", "100")
    for worker in (f"w{i}" for i in range(2 * MAX_PENDING_NOTES)):  # many owners, many notes
        coordinator.leases[f"x-{worker}"] = ShardLease(f"x-{worker}", worker, 1, None, ACTIVE)
        coordinator.heartbeat(
            HeartbeatRequest(
                worker=worker,
                held=[HeldShard(shard_id=f"x-{worker}", epoch=1, passed_over=[note("1", "1", 1)])],
            ),
            0.4,
        )
    assert len(coordinator.passed_over.pending) == MAX_PENDING_NOTES


def test_reports_for_shards_not_owned_count_for_nothing() -> None:
    coordinator = fresh()
    owning(coordinator)
    failing = Failing(attempts=3, seconds=10.0, error="down", blocked=True)
    request = HeartbeatRequest(
        worker="a",
        held=[HeldShard(shard_id="s0", epoch=7, millis_behind_latest=5000, failing=failing)],
    )
    coordinator.heartbeat(request, 0.2)
    assert coordinator.lag_millis() == {}
    assert coordinator.blocked_shards() == []


def test_no_worker_is_granted_more_shards_than_a_heartbeat_may_list() -> None:
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard(f"s{i}") for i in range(MAX_HELD_SHARDS + 5)])
    owning(coordinator)
    held = [lease for lease in coordinator.leases.values() if lease.owner == "a"]
    assert len(held) == MAX_HELD_SHARDS


def test_a_heartbeat_is_judged_before_it_changes_anything() -> None:
    """Issue 22.11: a claim the answer cannot echo (epoch 0, past the model's own check)
    failed after the worker's expiry had been extended."""
    coordinator = fresh()
    version = coordinator.version
    claim = HeldShard.model_construct(shard_id="s0", epoch=0, passed_over=[], failing=None)
    request = HeartbeatRequest.model_construct(worker="a", held=[claim], draining=False)
    with pytest.raises(ValueError, match="epoch"):
        coordinator.heartbeat(request, 0.0)
    assert "a" not in coordinator.workers
    assert coordinator.version == version


def test_a_listing_started_before_a_shard_end_never_refuses_it() -> None:
    """Adversarial review: a listing in flight when the SHARD_END came, answered from
    before the reshard, refused it; so did adopting another writer's table."""
    coordinator = fresh()
    owning(coordinator)
    in_flight = coordinator.listings.start()
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator)
    coordinator.set_shards([Shard(f"s{i}") for i in range(4)], in_flight)  # from before
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator)
    assert coordinator.listings.relist_wanted, "no listing has started since the claim"
    coordinator.adopt(coordinator.snapshot(0.0), 0.0)  # re-applies the same listing
    with pytest.raises(CheckpointDeferred):
        shard_end(coordinator)
    after = coordinator.listings.start()
    assert not coordinator.listings.relist_wanted, "one is under way"
    closed = [Shard("s0", closed=True), *(Shard(f"s{i}") for i in range(1, 4))]
    coordinator.set_shards(closed, after)
    assert shard_end(coordinator).state is FINISHED


def test_adopting_another_table_keeps_a_reset_not_saved_yet() -> None:
    """Issue 22.1: a new term's fence met an older term's late write and adopted its
    table; a reset asked for meanwhile, not saved yet, was dropped with the rest."""
    from streamconsumer.models.resource import ResetPosition, ResetRequest

    coordinator = fresh()
    owning(coordinator)
    coordinator.request_reset(ResetRequest(id="r1", to=ResetPosition(timestamp=None)))
    other = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED).snapshot(0.0)
    coordinator.adopt(other, 1.0)
    assert coordinator.last_reset is not None
    assert coordinator.last_reset.id == "r1"


def test_a_grant_handed_off_before_it_was_saved_is_released_not_revoked() -> None:
    """22.16, found by the soak: a grant not saved yet was never sent, so its hand-off
    (here a reset) told the worker an epoch no saved table keeps; after a leader change
    the worker ignored every grant of the saved, lower epoch, and the shard was never
    read. Nobody runs such a grant: it is released at once, and nothing is revoked."""
    coordinator = fresh()
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)  # granted to a, in memory only: every status write fails
    assert coordinator.leases["s0"].owner == "a"
    coordinator.request_reset(ResetRequest(id="r", to=ResetPosition(timestamp=None)))
    coordinator.step(0.1)  # a reset is a hand-off to nobody
    answer = beat(coordinator, "a", 0.2)
    assert [r for r in answer.revocations if r.shard_id == "s0"] == []
    assert coordinator.leases["s0"].state is RELEASED
    assert coordinator.leases["s0"].owner is None


def test_a_saved_grant_handed_off_is_still_revoked_from_a_worker_that_does_not_claim_it() -> None:
    coordinator = saved(fresh())
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    saved(coordinator)
    coordinator.request_reset(ResetRequest(id="r", to=ResetPosition(timestamp=None)))
    coordinator.step(0.1)
    answer = beat(coordinator, "a", 0.2)
    assert [(r.shard_id, r.reason) for r in answer.revocations if r.shard_id == "s0"] == [
        ("s0", RevocationReason.HANDOFF)
    ]
