"""The worker's side of the protocol (WorkerCore), without threads or HTTP."""

from __future__ import annotations

from streamconsumer.models import (
    Assignment,
    HeartbeatResponse,
    Revocation,
    RevocationReason,
    StartPosition,
    StartPositionType,
)
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.shard import (
    Answer,
    Finished,
    Initialize,
    LoseLease,
    Outcome,
    SendCheckpoint,
    ShardMachine,
    Stop,
)

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)


def grant(shard: str, epoch: int) -> Assignment:
    return Assignment(shard_id=shard, epoch=epoch, start=TRIM_HORIZON)


def answer(
    assignments: list[Assignment] = (),  # type: ignore[assignment]
    revocations: list[Revocation] = (),  # type: ignore[assignment]
    lease_ms: int = 6000,
) -> HeartbeatResponse:
    return HeartbeatResponse(
        lease_duration_ms=lease_ms, assignments=list(assignments), revocations=list(revocations)
    )


def revoke(shard: str, epoch: int, reason: RevocationReason) -> Revocation:
    return Revocation(shard_id=shard, epoch=epoch, reason=reason)


def test_a_lost_shard_is_never_renewed_by_the_answer_that_took_it() -> None:
    core = WorkerCore("w", prefetch=2)
    core.heartbeat(0.0)
    (machine,), _ = core.answered(answer([grant("s", 1)]), sent_at=0.0, now=0.1)
    core.heartbeat(0.0)  # lists s
    core.answered(answer(revocations=[revoke("s", 1, RevocationReason.LOST)]), 5.0, 5.1)
    assert machine.stopping is Stop.LOST
    assert machine.next(7.0) == Finished(Outcome.LOST), "it delivers nothing more"


def test_a_released_epoch_is_never_started_again_and_its_last_word_is_repeated() -> None:
    core = WorkerCore("w", prefetch=2)
    core.heartbeat(0.0)
    (machine,), _ = core.answered(answer([grant("s", 3)]), 0.0, 0.1)
    machine.revoke(Stop.HANDOFF)
    step = machine.next(0.2)  # not initialized yet: straight to the release
    assert isinstance(step, SendCheckpoint)
    assert step.request.release
    machine.answered(Answer.SAVED, 0.3)
    assert machine.next(0.3) == Finished(Outcome.RELEASED)
    core.finished(machine)
    core.heartbeat(0.0)
    # An operator restarted from an older status still counts s (epoch 3) as ours:
    started, resend = core.answered(answer([grant("s", 3)]), 1.0, 1.1)
    assert started == []
    assert [(r.shard_id, r.epoch, r.release) for r in resend] == [("s", 3, True)]
    started, _ = core.answered(answer([grant("s", 4)]), 2.0, 2.1)
    assert [m.epoch for m in started] == [4], "a new grant is a new epoch"


def test_a_handoff_of_a_shard_it_never_ran_is_answered_with_a_release() -> None:
    core = WorkerCore("w", prefetch=2)
    core.heartbeat(0.0)
    started, resend = core.answered(
        answer(revocations=[revoke("s", 2, RevocationReason.HANDOFF)]), 0.0, 0.1
    )
    assert started == []
    assert [(r.shard_id, r.epoch, r.release, r.sequence_number) for r in resend] == [
        ("s", 2, True, None)
    ]
    started, _ = core.answered(answer([grant("s", 2)]), 1.0, 1.1)
    assert started == [], "never starts the epoch it released"


def test_a_draining_worker_takes_nothing_and_exits_once_it_owns_nothing() -> None:
    core = WorkerCore("w", prefetch=2, drain_seconds=25)
    core.drain(now=0.0)
    assert core.heartbeat(0.0).draining
    started, resend = core.answered(answer([grant("s", 1)]), 0.0, 0.1)
    assert started == []
    assert [r.release for r in resend] == [True]
    assert not core.done(0.2), "the operator still counted s as ours"
    core.answered(answer(), 1.0, 1.1)
    assert core.done(1.2)


def test_timeouts_follow_the_lease() -> None:
    core = WorkerCore("w", prefetch=2)
    assert core.request_timeout == 5.0, "before the first answer"
    core.answered(answer(lease_ms=3000), 0.0, 0.1)
    assert core.request_timeout == 1.0
    core.failed(None, 0.2)
    assert core.interval == 1.0
    core.answered(answer(lease_ms=60_000), 1.0, 1.1)
    assert core.request_timeout == 5.0


def test_a_worker_refused_for_long_gives_up() -> None:
    """A deleted pod's token is refused for good: exit (non-zero), do not loop."""
    core = WorkerCore("w", prefetch=2, give_up_seconds=30)
    core.failed("heartbeat refused (401): the token was not accepted", 0.0)
    core.failed(None, 10.0)  # an unreachable operator neither counts nor resets
    core.failed("heartbeat refused (401)", 29.0)
    assert not core.done(29.0)
    core.failed("heartbeat refused (401)", 30.5)
    assert core.done(30.5)
    assert core.exit_reason is not None
    assert "refused this worker for 30s" in core.exit_reason


def test_an_answer_ends_a_run_of_refusals() -> None:
    core = WorkerCore("w", prefetch=2, give_up_seconds=30)
    core.failed("heartbeat refused (403)", 0.0)
    core.answered(answer(), 20.0, 20.1)
    core.failed("heartbeat refused (403)", 31.0)
    assert not core.done(31.0)


# --- the watchdog's rules (runtime.py ends the process; the simulation kills it) ------


def started_call(core: WorkerCore, shard: str, now: float) -> ShardMachine:
    """A granted shard whose processor call (initialize) began at `now`."""
    core.heartbeat(now)
    (machine,), _ = core.answered(answer([grant(shard, 1)]), sent_at=now, now=now)
    assert isinstance(machine.next(now), Initialize)
    return machine


def test_a_call_that_outlives_its_shards_fence_ends_the_process_at_once() -> None:
    core = WorkerCore("w", prefetch=2)
    machine = started_call(core, "s", 0.0)  # fence: 6 s after the heartbeat was sent
    assert core.watch(1.0) == machine.fence_deadline == 6.0, "look again when it closes"
    assert core.overran is None
    assert not core.done(5.9)
    assert core.watch(6.0) is None
    assert core.overran is not None
    assert "s: initialize was still running" in core.overran
    assert core.done(6.0), "no hand-off: the operator may grant s elsewhere soon"


def test_a_renewed_fence_lets_a_long_call_run_on() -> None:
    core = WorkerCore("w", prefetch=2, policy=FailurePolicy(timeout_seconds=60))
    started_call(core, "s", 0.0)
    core.heartbeat(4.0)
    core.answered(answer(), sent_at=4.0, now=4.1)
    assert core.watch(6.5) == 10.0, "the renewed fence"
    assert core.overran is None


def test_a_hung_call_is_reported_and_the_other_shards_are_handed_off_first() -> None:
    core = WorkerCore("w", prefetch=2, policy=FailurePolicy(timeout_seconds=3), drain_seconds=20)
    started_call(core, "s", 0.0)
    other = started_call(core, "t", 0.5)
    other.returned(0.6)  # initialize returned: t is healthy
    assert core.watch(1.0) == 3.0, "when s's call times out"
    core.watch(3.0)
    assert core.hung is not None
    assert "s: initialize has not returned after 3s" in core.hung
    assert core.draining, "the heartbeat asks the operator to move the shards"
    held = {h.shard_id: h for h in core.heartbeat(3.1).held}
    failing = held["s"].failing
    assert failing is not None
    assert failing.blocked, "Degraded names the shard"
    assert "timeoutSeconds 3" in failing.error
    assert held["t"].failing is None
    assert not core.done(3.2), "t is handed off first"
    core.finished(other)
    assert core.done(3.3), "then only the hung call is left: the process ends"


def test_a_hung_call_that_returns_after_all_is_handed_off_like_any_other() -> None:
    core = WorkerCore("w", prefetch=2, policy=FailurePolicy(timeout_seconds=3))
    machine = started_call(core, "s", 0.0)
    core.watch(3.0)
    machine.returned(4.0)
    assert core.hung is not None
    assert not core.done(4.0), "its release is still to come"


def test_lease_lost_is_a_notice_made_after_the_fence_only_its_timeout_counts() -> None:
    core = WorkerCore("w", prefetch=2, policy=FailurePolicy(timeout_seconds=30))
    machine = started_call(core, "s", 0.0)
    machine.returned(0.1)
    machine.revoke(Stop.LOST)
    assert isinstance(machine.next(7.0), LoseLease)  # the fence closed at 6 s
    assert core.watch(7.0) == 37.0
    assert core.overran is None


def test_a_waiting_checkpoint_is_given_up_within_the_lease() -> None:
    """Issue 22 (the freeze e2e): a release or SHARD_END sent to a replica that then froze
    must be sent again to the new leader before the shard's fence runs out, so the wait
    for its answer (the operator's hold plus the request timeout) stays inside the lease."""
    core = WorkerCore("w", prefetch=2)
    for lease_ms in (1_000, 3_000, 6_000, 20_000, 60_000, 3_600_000):
        core.answered(answer(lease_ms=lease_ms), 0.0, 0.1)
        assert core.request_timeout < core.waiting_timeout < lease_ms / 1000, lease_ms
