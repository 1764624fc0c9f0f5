"""Each fix of issue 11, reverted: a monkeypatch that puts the old behaviour back. The
regression examples in test_sees_every_bug.py must pass as the code is and must break
an invariant under their revert — the proof that the simulation can see each bug."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from streamconsumer.controller.consumer.autoscaler import Autoscaler
from streamconsumer.controller.consumer.driver import ConsumerDriver
from streamconsumer.controller.consumer.loop import ConsumerLoop
from streamconsumer.controller.leases.bounded import Bound
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.lease_groups import GroupedStatusApi, names_of
from streamconsumer.controller.leases.listings import Listings
from streamconsumer.controller.leases.stuck import StuckShards
from streamconsumer.controller.worker_api import answers
from streamconsumer.core.leases import RELEASED
from streamconsumer.models import StartPosition, StartPositionType
from streamconsumer.processor import Progress, Record
from streamconsumer.spark.batching import BatchingProcessor
from streamconsumer.worker import lanes
from streamconsumer.worker.calls import PartlyFailed, Stopped
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.driver import ShardDriver
from streamconsumer.worker.ending import ConsumerEnd
from streamconsumer.worker.failures import Failures
from streamconsumer.worker.processes import PodProcesses
from streamconsumer.worker.shard import Answer, Call, Deliver, ShardMachine, Sifted, Step, Stop

Revert = Callable[[pytest.MonkeyPatch], None]


def lineage_forgets_finished_shards(patch: pytest.MonkeyPatch) -> None:
    """11.1: no finished set; a parent is known finished only while a child's lease lives."""
    step = LeaseCoordinator.step

    def forgetful(self: LeaseCoordinator, now: float) -> Any:
        self.finished.clear()
        actions = step(self, now)
        self.finished.clear()
        return actions

    patch.setattr(LeaseCoordinator, "step", forgetful)


def a_raising_call_stays_delivered(patch: pytest.MonkeyPatch) -> None:
    """11.2: records of a call that raised still count as delivered, so a bare
    checkpoint() on shutdown stores them."""

    def raised(self: Progress) -> None:
        self.requested = self._before_call

    patch.setattr(Progress, "raised", raised)


def a_retried_batch_is_buffered_again(patch: pytest.MonkeyPatch) -> None:
    """11.3: the batching processor adds a retried batch to its buffer again."""

    patch.setattr(BatchingProcessor, "_unbuffer", lambda self, kept, since: None)


def unowned_shards_show_no_lag(patch: pytest.MonkeyPatch) -> None:
    """11.4: nobody measures the backlog of shards without a worker."""
    patch.setattr(ConsumerLoop, "probes_due", lambda self, now, allowed=None: [])


def grants_visible_before_saved(patch: pytest.MonkeyPatch) -> None:
    """11.5: a grant reaches its worker before the status holds it."""
    patch.setattr(LeaseCoordinator, "_saved", lambda self, lease: True)


def write_errors_restart_the_loop(patch: pytest.MonkeyPatch) -> None:
    """11.6: a failed status write ends the loop; kopf restarts it 2 s later from the
    saved status, dropping what was not saved."""
    from sim.operator import SimReplica

    replicas: dict[int, SimReplica] = {}  # by driver
    load = SimReplica._load

    def remembering(self: SimReplica) -> None:
        load(self)
        replicas[id(self.driver)] = self

    def failed(self: ConsumerLoop, write: Any, error: str, now: float) -> None:
        raise _LoopDied(error)

    written = ConsumerDriver._written

    def restart_on_death(self: ConsumerDriver, write: Any, outcome: Any) -> None:
        try:
            written(self, write, outcome)
        except _LoopDied:
            replicas[id(self)].crash(downtime=2.0)

    patch.setattr(SimReplica, "_load", remembering)
    patch.setattr(ConsumerLoop, "write_failed", failed)
    patch.setattr(ConsumerDriver, "_written", restart_on_death)


class _LoopDied(Exception):
    pass


def listing_inline(patch: pytest.MonkeyPatch) -> None:
    """11.11: the loop awaits ListShards: nothing else runs (no expiry, no grant, no
    status write) until it answers or times out."""
    tick = ConsumerDriver.tick

    def blocked(self: ConsumerDriver) -> None:
        if not self.waiting_for("listing"):
            tick(self)

    patch.setattr(ConsumerDriver, "tick", blocked)


def release_without_position(patch: pytest.MonkeyPatch) -> None:
    """11.7: the release carries no position (what shutdown_requested checkpointed is
    not stored)."""
    closing = ShardMachine._closing

    def positionless(self: ShardMachine, release: bool) -> Any:
        request = closing(self, release)
        if release and request.sequence_number is not None:
            self._final = request = request.model_copy(update={"sequence_number": None})
        return request

    patch.setattr(ShardMachine, "_closing", positionless)


def shorter_lease_cuts_promises(patch: pytest.MonkeyPatch) -> None:
    """11.8: a new lease duration applies to fences already promised."""
    update = LeaseCoordinator.update_spec

    def update_spec(self: LeaseCoordinator, spec: Any) -> None:
        before = self.lease_duration
        update(self, spec)
        shift = (self.lease_duration - before) * 4 / 3  # lease + grace, as heard then
        for progress in self.workers.values():
            progress.expires_at += shift
        self.durable = type(self.durable)(
            self.durable.leases, self.durable.finished, self.lease_duration
        )
        self._promises = {}

    patch.setattr(LeaseCoordinator, "update_spec", update_spec)


def fence_renewed_before_revocations(patch: pytest.MonkeyPatch) -> None:
    """11.9: the answer renews every fence, the lost shard's too, before revoking it: the
    machine delivers on until a checkpoint is refused."""
    answered = WorkerCore.answered

    def renew_first(self: WorkerCore, response: Any, sent_at: float, now: float) -> Any:
        kept = [r for r in response.revocations if r.reason.value != "lost"]
        lease = response.lease_duration_ms / 1000
        for machine in self.machines.values():
            machine.renew(sent_at + lease)
        return answered(self, response.model_copy(update={"revocations": kept}), sent_at, now)

    patch.setattr(WorkerCore, "answered", renew_first)


def retries_ignore_handoffs(patch: pytest.MonkeyPatch) -> None:
    """11.10: a failing batch is retried until it returns, whatever was asked."""
    next_step = ShardMachine.next

    def stubborn(self: ShardMachine, now: float) -> Step:
        if self._stop is Stop.HANDOFF and self.failures.count:
            self._stop = None
            try:
                return next_step(self, now)
            finally:
                self._stop = Stop.HANDOFF
        return next_step(self, now)

    patch.setattr(ShardMachine, "next", stubborn)


def trimmed_shards_keep_leases(patch: pytest.MonkeyPatch) -> None:
    """11.12: leases of shards that left the stream stay."""
    set_shards = LeaseCoordinator.set_shards

    def keep(self: LeaseCoordinator, shards: Any, listing: int | None = None) -> Any:
        kept = {sid: lease for sid, lease in self.leases.items()}
        changes = set_shards(self, shards, listing)
        self.leases.update({sid: kept[sid] for sid in kept if sid not in self.leases})
        return changes

    patch.setattr(LeaseCoordinator, "set_shards", keep)


def fixed_heartbeat_timeout(patch: pytest.MonkeyPatch) -> None:
    """Found by the simulation: a 5 s heartbeat timeout whatever the lease, so after an
    operator restart a worker may reach it only after its leases expired."""
    patch.setattr(WorkerCore, "request_timeout", property(lambda self: 5.0))


def idle_engine_without_listing(patch: pytest.MonkeyPatch) -> None:
    """Found by the simulation: before its first listing the engine does nothing (no
    expiry, no hand-off), so a restart while Kinesis is slow blocks every drain."""
    step = LeaseCoordinator.step
    patch.setattr(
        LeaseCoordinator, "step", lambda self, now: step(self, now) if self.shards_known else []
    )


def backlog_hidden_behind_a_finished_looking_shard(patch: pytest.MonkeyPatch) -> None:
    """Found by the simulation: a closed, unfinished shard read to its end looks caught
    up although its children wait behind it with the backlog, and a draining owner's
    last report (0) hides a measured backlog: a consumer at zero stays there."""
    from sim.stream import SimSource

    backlog = SimSource.backlog

    def shallow(self: SimSource, shard_id: str, start: Any) -> int | None:
        result = backlog(self, shard_id, start)
        return result if self.open_reader(shard_id, start).read().records else None

    def owners_first(self: LeaseCoordinator) -> dict[str, int]:
        lag = dict(self.backlog)
        for name, progress in self.workers.items():
            for shard_id, millis in progress.millis_behind.items():
                lease = self.leases.get(shard_id)
                if lease is not None and lease.owner == name:
                    lag[shard_id] = millis
        return lag

    patch.setattr(SimSource, "backlog", shallow)
    patch.setattr(LeaseCoordinator, "lag_millis", owners_first)


@contextlib.contextmanager
def reverted(revert: Revert) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        revert(patch)
        yield


def latest_read_at_every_move(patch: pytest.MonkeyPatch) -> None:
    """13.5: `initialPosition: LATEST` is handed to each new owner as LATEST, so a shard
    that moves before its first checkpoint skips what arrived meanwhile."""
    from streamconsumer.controller.leases import start

    start_position = start.start_position

    def latest_again(spec: Any, created: Any, lease: Any, parents: list[str]) -> StartPosition:
        position = start_position(spec, created, lease, parents)
        if position.type is StartPositionType.AT_TIMESTAMP and not spec.initial_timestamp:
            return StartPosition(type=StartPositionType.LATEST)
        return position

    for module in ("lease_coordinator", "views"):
        patch.setattr(f"streamconsumer.controller.leases.{module}.start_position", latest_again)


def pause_ignored(patch: pytest.MonkeyPatch) -> None:
    """13.4: `spec.paused` is not read: workers keep consuming."""
    step = LeaseCoordinator.step

    def unpaused(self: LeaseCoordinator, now: float) -> Any:
        paused, self.spec = self.spec.paused, self.spec.model_copy(update={"paused": False})
        try:
            return step(self, now)
        finally:
            self.spec = self.spec.model_copy(update={"paused": paused})

    patch.setattr(LeaseCoordinator, "step", unpaused)


def passed_over_at_the_first_failure(patch: pytest.MonkeyPatch) -> None:
    """13.2: the failure policy skips or dead-letters a batch without retrying it."""

    def exhausted(self: Failures, now: float, piece: bool = False) -> bool:
        return self.since is not None

    patch.setattr(Failures, "exhausted", exhausted)


def passing_over_checkpoints_unflushed_records(patch: pytest.MonkeyPatch) -> None:
    """13.2: a skipped batch moves the checkpoint even past records a batching processor
    has not committed yet."""

    def passed_over(self: Progress, records: Any) -> None:
        self._delivered = self._done = records[-1]
        self.requested = records[-1].checkpoint_sequence

    patch.setattr(Progress, "passed_over", passed_over)


def reset_without_handoff(patch: pytest.MonkeyPatch) -> None:
    """13.4: a reset takes the shard from its owner at once, so the next owner starts
    while the last one may still deliver."""
    request_reset = LeaseCoordinator.request_reset

    def at_once(self: LeaseCoordinator, request: Any) -> None:
        request_reset(self, request)
        for shard_id in self.last_reset.shards if self.last_reset else ():
            lease = self.leases[shard_id]
            self.leases[shard_id] = replace(
                lease, owner=None, state=RELEASED, checkpoint=None, resetting=False
            )

    patch.setattr(LeaseCoordinator, "request_reset", at_once)


def release_forgets_the_reset(patch: pytest.MonkeyPatch) -> None:
    """13.4: the owner's hand-off checkpoint clears the reset's position."""
    from streamconsumer.core import leases

    apply_checkpoint = leases.apply_checkpoint

    def forgetting(lease: Any, *args: Any, **kwargs: Any) -> Any:
        updated = apply_checkpoint(lease, *args, **kwargs)
        return replace(updated, start=None) if updated.checkpoint else updated

    patch.setattr(leases, "apply_checkpoint", forgetting)
    patch.setattr("streamconsumer.controller.leases.lease_coordinator.apply_checkpoint", forgetting)


def calls_outlive_their_fence(patch: pytest.MonkeyPatch) -> None:
    """13.2: nobody stops a processor call that runs on after its shard's fence closed (the
    worker lost touch with the operator): the shard's next owner processes it meanwhile."""
    patch.setattr(ShardMachine, "fence_deadline", property(lambda self: float("inf")))


def hung_calls_wait_forever(patch: pytest.MonkeyPatch) -> None:
    """13.2: no per-call timeout: a call that never returns holds its shard forever."""
    patch.setattr(ShardMachine, "hung", lambda self, now: False)
    watch = WorkerCore.watch

    def unhurried(self: WorkerCore, now: float) -> float | None:
        check_at = watch(self, now)  # a timeout already past: nothing to look at again
        return None if check_at is not None and check_at <= now else check_at

    patch.setattr(WorkerCore, "watch", unhurried)


def serving_before_the_term_fence(patch: pytest.MonkeyPatch) -> None:
    """22.1: a new term serves workers from the status it has only read, before a write
    of its own landed: a late write of the old term can still replace that table."""
    patch.setattr(ConsumerLoop, "serving", property(lambda self: self.deposed is None))


def abandoned_writes_resend(patch: pytest.MonkeyPatch) -> None:
    """22.1: a status write whose job timed out runs on in its thread and, after a 409
    whose table is ours, re-sends its older table over a newer one."""
    from streamconsumer.controller.leases import status

    resolve = status.StatusWriter._resolve

    def resend(self: status.StatusWriter, attempt: Any, current: Any) -> Any:
        attempt.number = self._attempts  # as if it were always the newest
        return resolve(self, attempt, current)

    patch.setattr(status.StatusWriter, "_resolve", resend)


def unwritable_letters_retried_as_target_failures(patch: pytest.MonkeyPatch) -> None:
    """22.7: a dead letter too large for its target is written again and again, as if the
    target were down: the shard stalls, reported as failing, never as blocked."""
    patch.setattr(
        ShardMachine, "cannot_dead_letter", lambda self, now, reason: self.raised(now, reason)
    )


def shard_end_taken_for_open_shards(patch: pytest.MonkeyPatch) -> None:
    """22.12: SHARD_END finishes a shard whatever the listing says: a worker that sends it
    early (a buggy reader) makes the operator skip every record left in the shard."""
    from streamconsumer.core import leases

    apply_checkpoint = leases.apply_checkpoint

    def trusting(lease: Any, *args: Any, **kwargs: Any) -> Any:
        return apply_checkpoint(lease, *args, **{**kwargs, "shard_closed": True})

    patch.setattr("streamconsumer.controller.leases.lease_coordinator.apply_checkpoint", trusting)


def refused_shard_end_let_go(patch: pytest.MonkeyPatch) -> None:
    """22.12: a worker whose SHARD_END is refused lets the shard go as if it had ended:
    nobody reads the rest of it (the worker repeats its SHARD_END whenever asked)."""
    answered = ShardMachine.answered

    def letting_go(self: ShardMachine, answer: Answer, now: float) -> None:
        if answer is Answer.INVALID and self._in_flight is self._final:
            answer = Answer.SAVED
        answered(self, answer, now)

    patch.setattr(ShardMachine, "answered", letting_go)


def a_new_stream_starts_at_once(patch: pytest.MonkeyPatch) -> None:
    """Issue 22.6: a DynamoDB table's new stream is read beside the old stream's tail
    (nothing makes its first shards wait): an item's newer changes overtake its older."""
    from streamconsumer.core import leases, lineage

    assignable_shards = lineage.assignable_shards

    def at_once(shards: Any, finished: Any) -> list[str]:
        return assignable_shards([replace(s, waits_for=()) for s in shards], finished)

    patch.setattr(leases, "assignable_shards", at_once)


def terms_resume(patch: pytest.MonkeyPatch) -> None:
    """22.2 and 22.3: the election as it was. Seeing another holder (or no Lease) clears
    the renewal time, so `lost` is false for good; a renewal answered after the deadline
    makes the replica lead again; a term is never over for the lifecycle."""
    from streamconsumer.core.election import Act, Action, Election

    def observe(self: Election, record: Any, now: float) -> None:
        changed = not self._known or (record and record.version) != (
            self._record and self._record.version
        )
        self._known = True
        if changed:
            self._record, self._observed_at = record, now
        if self._renewed_at is not None and (record is None or record.holder != self.identity):
            self._renewed_at = None

    def swapped(self: Election, action: Any, record: Any, sent_at: float, now: float) -> None:
        self._record, self._observed_at, self._renewed_at = record, sent_at, sent_at
        self._term = record.transitions

    def leading(self: Election, now: float) -> bool:
        return self._renewed_at is not None and now - self._renewed_at < (
            self.timing.renew_deadline_seconds
        )

    def lost(self: Election, now: float) -> bool:
        return self._renewed_at is not None and not leading(self, now)

    def next_action(self: Election, now: float) -> Action:
        record = self._record
        if record is None:
            return Action(Act.CREATE)
        if record.holder == self.identity:
            if self._renewed_at is None:
                return Action(Act.ACQUIRE, record.version, record.transitions)
            return Action(Act.RENEW, record.version, record.transitions)
        if not record.holder or now - self._observed_at >= record.lease_seconds:
            return Action(Act.ACQUIRE, record.version, record.transitions + 1)
        return Action(Act.WAIT)

    for name, method in [
        ("observe", observe),
        ("swapped", swapped),
        ("leading", leading),
        ("lost", lost),
        ("next_action", next_action),
    ]:
        patch.setattr(Election, name, method)


def wire_refuses_unknown_fields(patch: pytest.MonkeyPatch) -> None:
    """22.8: messages as they were parsed before wire version 2: a field the reader does
    not know is an error, so every answer of a newer operator (and every request of a
    newer worker) fails."""
    from pydantic import ConfigDict

    from streamconsumer.models.base import WireModel

    def subclasses(cls: type[WireModel]) -> Iterator[type[WireModel]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    for message in list(subclasses(WireModel)):
        strict: Any = type(
            message.__name__, (message,), {"model_config": ConfigDict(extra="forbid")}
        )
        patch.setattr(message, "model_validate_json", strict.model_validate_json)


def an_unsaved_release_is_lost(patch: pytest.MonkeyPatch) -> None:
    """A release taken but not saved yet is forgotten once its shard is planned for
    another worker: the releasing worker is told LOST and lets go of it."""
    patch.setattr(LeaseCoordinator, "_unsaved_release", lambda self, shard, worker, epoch: None)


def unsent_grants_revoked(patch: pytest.MonkeyPatch) -> None:
    """22.16: a grant handed off before it was saved (so never sent) is revoked like any
    other: the revocation tells its would-be owner an epoch no saved table keeps."""
    patch.setattr(LeaseCoordinator, "_never_sent", lambda self, lease: False)


def deployment_never_read(patch: pytest.MonkeyPatch) -> None:
    """22.17, 22.18: the autoscaler trusts the count it believes the Deployment runs (the
    status' word, then its own last scale call) and never the Deployment as read."""
    patch.setattr(Autoscaler, "deployment_read", lambda self, replicas, read_at: False)


def a_lapse_resumes(patch: pytest.MonkeyPatch) -> None:
    """22.3: a renewal answered after the renew deadline resumes the term, and a lapse
    alone is no loss: the consume daemon that returned in the lapse is never started
    again, and the replica leads on with no consumer."""
    from streamconsumer.core.election import Election

    patch.setattr(Election, "_end_if_lapsed", lambda self, now: self._ended)
    patch.setattr(Election, "lost", lambda self, now: self._term is not None and self._ended)


def a_hand_off_waits_for_shard_end(patch: pytest.MonkeyPatch) -> None:
    """A draining worker's SHARD_END waits for the operator's next listing however long
    it takes, past the pod's grace period."""
    patch.setattr(ShardMachine, "_hands_off_instead", lambda self, request: False)


def withdrawn_leases_released_at_once(patch: pytest.MonkeyPatch) -> None:
    """25 (stuck shards): a withdrawn lease is released at once, without waiting for its
    owner's fence to close."""
    judge = StuckShards.judge

    def hasty(self: StuckShards, *args: Any) -> bool:
        changed = judge(self, *args)
        self.withdrawn = {s: replace(w, closes_at=-1.0) for s, w in self.withdrawn.items()}
        return changed

    patch.setattr(StuckShards, "judge", hasty)


def partial_responses_fail_whole_batches(patch: pytest.MonkeyPatch) -> None:
    """29: a partial batch response counts as the whole batch failing: the records it
    reported done are delivered again."""

    def whole(
        self: ShardMachine,
        now: float,
        done: int,
        error: str,
        wall: float | None = None,
        *_: object,
    ) -> None:
        self.raised(now, error, wall)

    patch.setattr(ShardMachine, "partly_failed", whole)


def partial_responses_read_as_success(patch: pytest.MonkeyPatch) -> None:
    """29: the records a partial batch response reports failed count as done."""

    def success(self: ShardMachine, now: float, *_: object, **__: object) -> None:
        self.returned(now)

    patch.setattr(ShardMachine, "partly_failed", success)


def young_records_given_up_with_old_ones(patch: pytest.MonkeyPatch) -> None:
    """29: a failing batch whose first record is past maxRecordAgeSeconds is given up
    whole, its younger records with it."""
    too_old = Failures.records_too_old

    def whole(self: Failures, records: Sequence[Record], wall: float) -> int:
        return len(records) if too_old(self, records, wall) else 0

    patch.setattr(Failures, "records_too_old", whole)


def filter_ignored(patch: pytest.MonkeyPatch) -> None:
    """29: processor.filter not applied: every record is delivered."""
    patch.setattr(ShardMachine, "sift", lambda self, batch: Sifted([batch], 0))


def parallel_checkpoint_at_the_last_done(patch: pytest.MonkeyPatch) -> None:
    """29 (parallelism): a parallel call checkpoints its last record done, not the low
    watermark: past records of a group that failed."""

    def highest(count: int, done: Collection[int]) -> int:
        return max(done) + 1 if done else 0

    patch.setattr(lanes, "watermark", highest)


def parallel_split_ignores_keys(patch: pytest.MonkeyPatch) -> None:
    """29 (parallelism): a batch dealt out to the calls record by record, a key's records
    in several calls at once."""

    def dealt(records: Sequence[Record], parallelism: int) -> list[list[int]]:
        groups = [list(range(len(records)))[n::parallelism] for n in range(parallelism)]
        return [group for group in groups if group]

    patch.setattr(lanes, "split", dealt)


def parallel_done_ahead_forgotten(patch: pytest.MonkeyPatch) -> None:
    """29 (parallelism): the records a parallel call did after one that failed are
    delivered again with it."""
    patch.setattr(ShardMachine, "_done_in", lambda self, batch: frozenset())


def batch_size_forgets_earlier_calls(patch: pytest.MonkeyPatch) -> None:
    """29 (batchSize): a call that raises after its group's earlier calls returned
    counts them not done: their records are delivered again."""
    init = Stopped.__init__

    def forgetting(self: Stopped, done: int, cause: Exception) -> None:
        init(self, 0, cause)

    patch.setattr(Stopped, "__init__", forgetting)


def a_process_speaks_only_as_its_pod(patch: pytest.MonkeyPatch) -> None:
    """29: the worker API takes a worker name only if it is the token's pod's: the
    processes of a pod (`pod#1`) are refused."""
    patch.setattr(answers, "worker_process", lambda worker: (worker, None))


def sigterm_stays_with_the_supervisor(patch: pytest.MonkeyPatch) -> None:
    """29: the supervisor takes SIGTERM and passes it on to no process: they run on until
    the pod is killed."""
    drain = PodProcesses.drain

    def kept(self: PodProcesses, now: float) -> list[int]:
        drain(self, now)
        return []

    patch.setattr(PodProcesses, "drain", kept)


def lease_groups_deleted_before_the_commit(patch: pytest.MonkeyPatch) -> None:
    """29: the objects of the table a write replaces (lease groups, a lease log's) are
    deleted before its status write lands: the stored status references them still (and
    keeps them if the write fails)."""
    replace_status = GroupedStatusApi.replace_status

    def early(self: GroupedStatusApi, body: dict[str, Any]) -> dict[str, Any]:
        base = self._layouts.get(body["metadata"].get("resourceVersion"))
        self._delete(sorted(names_of(base)))
        return replace_status(self, body)

    patch.setattr(GroupedStatusApi, "replace_status", early)


def driver_forgets_what_a_partly_failed_call_did_ahead(patch: pytest.MonkeyPatch) -> None:
    """44 (one worker driver): the driver tells the machine of a partly failed call
    without the records done after its first failed one, as the harness's own step loop
    did: they are delivered again with the failed ones."""
    failed = ShardDriver.failed

    def forgetting(self: ShardDriver, step: Call, error: Exception) -> None:
        if isinstance(error, PartlyFailed) and isinstance(step, Deliver):
            error = PartlyFailed(step.batch.records, error.done)
        failed(self, step, error)

    patch.setattr(ShardDriver, "failed", forgetting)


def records_past_the_end_delivered(patch: pytest.MonkeyPatch) -> None:
    """43: a bounded consumer's worker reads on past the end, as an older worker would."""
    patch.setattr(ConsumerEnd, "cut", lambda self, batch: batch)


def quiet_shards_never_end(patch: pytest.MonkeyPatch) -> None:
    """43: a shard ends only at a record past the end: a quiet one holds the consumer."""
    patch.setattr(ConsumerEnd, "caught_up", lambda self, batch: False)


def open_shards_end_only_when_closed(patch: pytest.MonkeyPatch) -> None:
    """43: the operator takes SHARD_END only for shards the listing shows closed, a
    bounded consumer's too: its open shards never finish."""
    patch.setattr(Bound, "takes_open_shards_end", lambda self, listings: False)


def complete_on_a_listing_older_than_the_ends(patch: pytest.MonkeyPatch) -> None:
    """43 (found by review): a bounded consumer is Complete on the listing it has, though
    it is older than the SHARD_ENDs it took: a split just before the end is not listed
    yet, and its children, which hold records before the end, are never read."""
    patch.setattr(Listings, "listed_since_ends", property(lambda self: True))
