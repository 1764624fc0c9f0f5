"""One held shard as a sans-I/O state machine: it says what to do next (`next`) and is
told what happened (batches read, processor calls returned or raised, checkpoint
answers, revocations, fence renewals). One driver runs it (`driver.py`), hosted by the
worker's threads (`runtime.py`), the simulation and the tests. It never blocks, sleeps
or reads a clock. Where the shard is in its life is one `phase.Phase`, each move checked
against `phase.TRANSITIONS`; the failure policy's counts and decisions are
`failures.Failures`.

The rules it keeps:
- Deliver only while this shard's own fence is open: until `lease duration` after the
  last heartbeat that confirmed the shard was *sent* (docs/design.md#self-fencing). A
  loss recorded before a renewal is never undone by it.
- Checkpoint only what returned: see `processor.Progress`
  (docs/design.md#only-what-returned-is-checkpointed).
- A hand-off or a loss interrupts retries: a poison batch never blocks a planned move.
- A call that reports some of its records failed (a partial batch response) leaves the
  records before the first failed one done and the rest as the head batch, failed once:
  retried from there, never re-running what is done, never skipping what is not.
- Under `processor.parallelism` a call runs groups of keys at once (`calls.py`), so records
  after the first failed one may be done: they stay in the head batch (the checkpoint
  cannot pass the failed one) but each Deliver names them done, and the failure policy
  passes over only the others (docs/design.md#per-key-parallelism).
- A failing batch's records older than `maxRecordAgeSeconds` (by their arrival, on the
  wall clock the driver passes with the failure) are not retried: they go to skip or
  dead-letter at once, the younger rest of the batch stays and is retried.
- Records the filter (`processor.filter`) drops are never delivered: a checkpoint at a
  later record covers them, and those after a read's last kept record (or a whole read
  of them) are passed over as the failure policy passes records over, so the checkpoint
  moves past them without passing a batching processor's unflushed records.
- A batch that keeps raising is retried with back-off, then the failure policy decides
  (`models.failure`): block (retry on, reported), skip, or dead-letter it first. A
  dead letter its target can never hold blocks the shard as `block` does: a write that
  cannot succeed is not retried as if the target were down.
- A call is watched, not trusted to return: `call_started` and `fence_deadline` let the
  worker end the process before a call outlives the shard's fence, and `hung` says when
  it has run past the policy's timeout (a thread cannot be interrupted; `core.watch`).
- The release carries the position and is repeated until the status holds it, so a
  planned move replays nothing even across an operator restart
  (docs/design.md#hand-off-on-planned-moves)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

from streamconsumer.core.backoff import Backoff
from streamconsumer.models import Assignment, CheckpointRequest, HeldShard
from streamconsumer.models.api import MAX_MILLIS_BEHIND, Failing, PassedOver
from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import SHARD_END, Checkpointer, CheckpointError, Progress, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.batching import BatchingWindow
from streamconsumer.worker.ending import ConsumerEnd
from streamconsumer.worker.failures import Failures
from streamconsumer.worker.phase import FINISHED, TRANSITIONS, Phase

RESEND_UNSAVED_SECONDS = 0.2  # a release the status does not hold yet: ask again soon
MAX_UNREPORTED_NOTES = 8  # passed-over notes kept apart while heartbeats go unanswered


class Stop(Enum):
    HANDOFF = "handoff"  # planned: finish the batch, checkpoint, release
    LOST = "lost"  # fenced out: stop at once, no checkpoint


class Outcome(Enum):
    """A finished phase, named as `Phase` names it (`ShardMachine.outcome`)."""

    ENDED = "ended"  # read to the end, SHARD_END stored
    RELEASED = "released"  # handed off with its position
    LOST = "lost"  # taken away; nothing stored


class Answer(Enum):
    """The operator's answer to a checkpoint or release."""

    ACCEPTED = "accepted"
    SAVED = "saved"  # accepted, and the status holds it
    LOST = "lost"  # 409: the lease is not ours under this epoch
    INVALID = "invalid"  # 400: refused as malformed (unknown shard, backwards)
    UNREACHABLE = "unreachable"  # no answer, or 5xx: try again later


@dataclass(frozen=True)
class FilteredOut(ReadResult):
    """Records the filter dropped after a read's last kept record: passed over without
    a processor call once every batch before them is done."""


@dataclass(frozen=True)
class Sifted:
    """A read after the filter: what to deliver or pass over, and how many it dropped."""

    batches: list[ReadResult]
    dropped: int


# --- steps: what the driver does next ----------------------------------------------------


@dataclass(frozen=True)
class Initialize:
    """Create the processor and call initialize(shard)."""


@dataclass(frozen=True)
class Deliver:
    """Call process_records(batch.records, checkpointer), but for the records whose
    positions are in `done`: an earlier call under a parallelism did them."""

    batch: ReadResult
    done: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True)
class GivenUp:
    """A batch whose retries are used up, the error it last raised and how often it
    was tried: what the failure policy passes over (`Skip`, `DeadLetter`)."""

    batch: ReadResult
    error: str
    attempts: int


@dataclass(frozen=True)
class Skip(GivenUp):
    """The failure policy passes the batch over: log and count it."""


@dataclass(frozen=True)
class DeadLetter(GivenUp):
    """Write the batch's records, with the error, to the dead-letter target."""


@dataclass(frozen=True)
class EndShard:
    """Call shard_ended(checkpointer)."""


@dataclass(frozen=True)
class Shutdown:
    """Call shutdown_requested(checkpointer)."""


@dataclass(frozen=True)
class LoseLease:
    """Call lease_lost()."""


@dataclass(frozen=True)
class SendCheckpoint:
    request: CheckpointRequest


@dataclass(frozen=True)
class Wait:
    """Nothing to do until `until` (None: until something is told to the machine)."""

    until: float | None = None


@dataclass(frozen=True)
class Finished:
    outcome: Outcome


Step = (
    Initialize
    | Deliver
    | Skip
    | DeadLetter
    | EndShard
    | Shutdown
    | LoseLease
    | SendCheckpoint
    | Wait
    | Finished
)
ProcessorCall = Initialize | Deliver | EndShard | Shutdown | LoseLease
Call = ProcessorCall | Skip | DeadLetter  # what the driver does and answers with returned/raised
CALL_NAMES: dict[type, str] = {
    Initialize: "initialize",
    Deliver: "process_records",
    EndShard: "shard_ended",
    Shutdown: "shutdown_requested",
    LoseLease: "lease_lost",
    Skip: "skip",
    DeadLetter: "the dead-letter write",
}


class ShardMachine:
    def __init__(
        self,
        worker: str,
        assignment: Assignment,
        fence_deadline: float,
        prefetch: int,
        wants_empty_batches: bool = False,
        retry: Backoff | None = None,
        policy: FailurePolicy | None = None,
        read_interval: float = 0.0,
        keep: Callable[[Record], bool] | None = None,
        parallelism: int = 1,
        batch_size: int | None = None,
        window: BatchingWindow | None = None,
    ) -> None:
        self.worker = worker
        end = assignment.end  # a bounded consumer's (docs/replaying.md)
        self._end = ConsumerEnd(end.timestamp()) if end is not None else None
        self.parallelism = parallelism  # process_records calls of a Deliver in flight at most
        self.batch_size = batch_size  # records of one process_records call at most
        self._done_ahead: frozenset[tuple[int, int]] = frozenset()  # done after a failed one
        self._keep = keep  # processor.filter: None keeps every record
        self.assignment = assignment
        self.shard_id = assignment.shard_id
        self.epoch = assignment.epoch
        self.progress = Progress(self.shard_id, assignment.start.sequence_number)
        self.checkpointer = Checkpointer(self.progress)
        self._deadline = fence_deadline
        self._prefetch = prefetch
        self._read_interval = read_interval  # the shard's read budget, as time between reads
        self._last_read_at = -float("inf")
        self._wants_empty = wants_empty_batches
        self.failures = Failures(policy, retry)  # the failure policy: retries, give-ups
        self._batches: deque[ReadResult] = deque()
        self._window = window or BatchingWindow()  # reading.maxBatchingWindowSeconds
        self._delivered_to: tuple[int, int] | None = None  # the last record a Deliver held
        self._end_read = False
        self._stop: Stop | None = None
        self._call: Call | None = None
        self._call_started: float | None = None
        # A Deliver made of several process_records calls (calls.py: groups, parts in turn
        # under batchSize) is timed per call: when each group's running call began, and
        # when the last began or ended (the clock between a group's calls).
        self._parts: dict[int, float] = {}
        self._part_event: float | None = None
        self._in_flight: CheckpointRequest | None = None
        self._final: CheckpointRequest | None = None  # the release or SHARD_END to store
        self._phase = Phase.STARTING
        self._passed_over: list[PassedOver] = []  # for the next heartbeat (Events)
        self._notes_sent = 0  # the first n of them went with the heartbeat in flight
        self._pieces_ahead = 0  # the first n batches are pieces of a bisected batch
        self._send_failures = 0
        self._retry_send_at = -float("inf")  # the operator did not answer, or not yet saved
        self.millis_behind: int | None = None

    # --- what the worker tells it ------------------------------------------------------

    def renew(self, deadline: float) -> None:
        """A heartbeat that listed this shard was answered without taking it away."""
        self._deadline = max(self._deadline, deadline)

    def revoke(self, reason: Stop) -> None:
        if self._stop is not Stop.LOST:  # loss overrides a pending hand-off
            self._stop = reason

    @property
    def stopping(self) -> Stop | None:
        return self._stop

    @property
    def fence_deadline(self) -> float:
        """Deliveries stop at this time unless a heartbeat renews it."""
        return self._deadline

    @property
    def call(self) -> Call | None:
        """The call the driver is making, if any."""
        return self._call

    @property
    def call_started(self) -> float | None:
        """When the call in flight began; None when there is none. Of a Deliver made of
        several process_records calls, when the oldest of those running began: the
        timeout is each call's, not the whole read's."""
        if self._parts:
            return min(self._parts.values())
        return self._part_event if self._part_event is not None else self._call_started

    def hung(self, now: float) -> bool:
        """Has the call in flight run past the policy's timeout?"""
        return self.failures.hung(self.call_started, now)

    def hung_call(self, now: float) -> str:
        """What a hung call is, for Degraded and the worker's log."""
        started = self.call_started
        assert self._call is not None
        assert started is not None
        return (
            f"{CALL_NAMES[type(self._call)]} has not returned after "
            f"{now - started:.0f}s (timeoutSeconds {self.failures.policy.timeout_seconds:g})"
        )

    def part_begins(self, group: int, now: float, whole: bool = True) -> bool:
        """A process_records call of the Deliver in flight is about to begin: one of a
        group's calls in turn (processor.batchSize), or a group's first (parallelism).
        False when it must not: the shard is lost or fenced, or handed off with one
        group (the calls done so far are a prefix of the batch, so the release at the
        checkpoint replays nothing; with groups at once it would replay the records the
        others did, so a hand-off waits for them). The Deliver then ends `interrupted`."""
        handing_off = self._stop is Stop.HANDOFF and self.parallelism == 1 and whole
        if self._stop is Stop.LOST or handing_off or now >= self._deadline:
            return False
        self._parts[group] = self._part_event = now
        return True

    @property
    def between_parts(self) -> bool:
        """A Deliver made of several calls, none of them running now: only the driver's
        own code runs (no call begins once fenced), so its fence does not end the process."""
        return self._part_event is not None and not self._parts

    def part_ended(self, group: int, now: float) -> None:
        self._parts.pop(group, None)
        self._part_event = now

    def _end_call(self) -> Call | None:
        call, self._call, self._call_started = self._call, None, None
        self._parts, self._part_event = {}, None
        return call

    def wants_read(self) -> bool:
        return (
            self.outcome is None
            and self._stop is None
            and not self._end_read
            and len(self._batches) < self._prefetch
        )

    def read_allowed_at(self) -> float:
        """When the next read may start (reading.maxReadsPerSecond)."""
        return self._last_read_at + self._read_interval

    def reading(self, now: float, wall: float | None = None) -> None:
        """A read starts now (`wall`: seconds since the epoch, for a bounded consumer's
        end): the next waits its turn."""
        self._last_read_at = now
        if self._end is not None:
            self._end.reading(wall)

    def sift(self, batch: ReadResult) -> Sifted:
        """The batch as the filter leaves it: the kept records, then a FilteredOut of the
        dropped ones after the last kept record. Touches no state: a driver may call it
        outside its lock (the filter parses JSON). A bounded consumer's end cuts it first."""
        if self._end is not None:
            batch = self._end.cut(batch)
        records, keep = batch.records, self._keep
        kept = [i for i, record in enumerate(records) if keep(record)] if keep else None
        if kept is None or len(kept) == len(records):
            return Sifted([batch], 0)
        pieces: list[ReadResult] = []
        if kept or self._wants_empty:  # a batching processor's clock ticks on (its flush)
            pieces.append(replace(batch, records=[records[i] for i in kept]))
        tail = records[kept[-1] + 1 :] if kept else records
        if tail:
            end = (batch.millis_behind_latest, batch.shard_end, batch.child_shards)
            pieces.append(FilteredOut(tail, *end))
        return Sifted(pieces, len(records) - len(kept))

    def read(
        self, batch: ReadResult, sifted: Sifted | None = None, now: float | None = None
    ) -> int:
        """A read's batch, arrived at `now` (None: untimed, its window counts from when the
        machine first looks at it), to deliver in turn (`sifted`: `sift(batch)`, if made
        already); returns how many records the filter dropped from it."""
        sifted = sifted or self.sift(batch)
        pieces = sifted.batches
        if self._end is not None and self._end.caught_up(batch):
            pieces = [*pieces, ReadResult([], 0, shard_end=True)]
        self._end_read = self._end_read or any(piece.shard_end for piece in pieces)
        self._batches.extend(pieces)
        if now is not None:
            last = next((p.records[-1] for p in reversed(pieces) if p.records), None)
            self._window.arrived(last, now)
        return sifted.dropped

    def held(self, now: float) -> HeldShard:
        done = self.progress.done
        failures, started = self.failures, self.call_started
        failing = failures.failing(now)
        if started is not None and self.hung(now):
            failing = Failing(
                attempts=failures.count + 1,
                seconds=now - (started if failures.since is None else failures.since),
                error=f"{self.hung_call(now)}: the worker restarts",
                blocked=True,
            )
        return HeldShard(
            shard_id=self.shard_id,
            epoch=self.epoch,
            sequence_number=done.sequence_number if done else self.progress.stored,
            millis_behind_latest=self.millis_behind,
            failing=failing,
            passed_over=self._notes_to_send(),
        )

    def _notes_to_send(self) -> list[PassedOver]:
        self._notes_sent = len(self._passed_over)
        return list(self._passed_over)

    def reported(self, held: HeldShard) -> None:
        """A heartbeat carrying `held` was answered: its passed-over notes arrived."""
        for note in held.passed_over:
            if note in self._passed_over:
                self._passed_over.remove(note)
                self._notes_sent = max(0, self._notes_sent - 1)

    # --- what to do next ---------------------------------------------------------------

    def next(self, now: float) -> Step:
        step = self._next(now)
        if self._call is not None and self._call_started is None:
            self._call_started = now
        return step

    def _next(self, now: float) -> Step:
        if self.outcome is not None:
            return Finished(self.outcome)
        if self._call is not None or self._in_flight is not None:
            return Wait()  # the driver is waiting for that
        if self._stop is Stop.LOST:
            if self._final is not None:  # already closing: its last word was sent
                return self._finish(Outcome.RELEASED if self._final.release else Outcome.ENDED)
            if self._phase is not Phase.STARTING:
                return self._begin(LoseLease())
            return self._finish(Outcome.LOST)
        if self._final is not None:
            if now < self._retry_send_at:
                return Wait(self._retry_send_at)
            return self._send(self._final)
        self._take_done_ahead()
        fenced = now >= self._deadline
        if self._stop is Stop.HANDOFF:  # interrupts any retry of a processor call
            if self._phase in (Phase.STARTING, Phase.SHUT_DOWN):
                return self._send(self._closing(release=True))
            return Wait() if fenced else self._begin(Shutdown())
        if fenced:
            return Wait()  # self-fenced: deliver nothing until a heartbeat renews the fence
        pending = self.progress.pending()
        if pending is not None and pending != SHARD_END:
            if now < self._retry_send_at:
                return Wait(self._retry_send_at)
            return self._send(self._checkpoint(pending))
        failures = self.failures
        if now < failures.retry_at:
            return Wait(failures.retry_at)
        if self._phase is Phase.STARTING:
            return self._begin(Initialize())
        while self._batches:
            batch = self._batches[0]
            if isinstance(batch, FilteredOut):
                self.progress.passed_over(batch.records)
                self._took(self._batches.popleft())
                return self._next(now)  # its checkpoint first: nothing else may come soon
            if failures.too_old and batch.records and not failures.unwritable:
                return self._begin(self._give_up_old(batch))
            piece = self._pieces_ahead > 0
            if batch.records and not failures.unwritable and failures.exhausted(now, piece):
                then = failures.then
                if then is not AfterRetries.BLOCK and len(batch.records) > 1:
                    self._bisect()  # find the records that fail, pass over only those
                    continue
                undone = self._undone(batch)
                if then is AfterRetries.SKIP:
                    return self._begin(Skip(undone, failures.error, failures.count))
                if then is AfterRetries.DEAD_LETTER:
                    return self._begin(DeadLetter(undone, failures.error, failures.count))
            if batch.records and self._first_try():
                more_coming = not self._end_read and self._prefetch > 1  # read on behind it
                due = self._window.due(self._batches, now, more_coming)
                if due is not None:
                    return Wait(due)
                self._window.delivered()
                batch = self._batches[0]
            if batch.records or self._wants_empty:
                return self._begin(Deliver(batch, self._done_in(batch)), batch)
            self._took(self._batches.popleft())  # an empty read: nothing to deliver
        if self._end_read:
            if self._phase is not Phase.ENDING:
                self.progress.shard_ended()
                return self._begin(EndShard())
            return self._send(self._closing(release=False))
        return Wait()

    def _first_try(self) -> bool:
        """The head batch was never delivered, nor is it a piece or the rest of one that
        was (the rest of an age split or an interrupted call)."""
        first = self._batches[0].records[0].position
        fresh = self._delivered_to is None or first > self._delivered_to
        return (
            fresh and self.failures.count == 0 and not self._pieces_ahead and not self._done_ahead
        )

    def _take_done_ahead(self) -> None:
        """The head's leading records that an earlier parallel call did (a bisection's or
        an age split's pieces, or what follows a passed-over piece) are done: taken
        without a call, so a hand-off's release carries them and the next owner does not
        do them again. The head's first record not done stays the head."""
        while self._done_ahead and self._batches:
            head = self._batches[0]
            if isinstance(head, FilteredOut):
                return
            done = 0
            while done < len(head.records) and head.records[done].position in self._done_ahead:
                done += 1
            if done == 0:
                return
            self.progress.passed_over(head.records[:done])
            if done == len(head.records):
                self._took_head()
                continue
            last = head.records[done - 1].position
            self._batches[0] = replace(head, records=head.records[done:])
            self._done_ahead = frozenset(p for p in self._done_ahead if p > last)
            self.failures.too_old = max(self.failures.too_old - done, 0)
            return

    def _done_in(self, batch: ReadResult) -> frozenset[tuple[int, int]]:
        ahead = self._done_ahead
        return frozenset(r.position for r in batch.records if r.position in ahead)

    def _undone(self, batch: ReadResult) -> ReadResult:
        """The batch without the records an earlier parallel call did: what the failure
        policy passes over (never empty: a batch that failed holds a record not done)."""
        if not self._done_ahead:
            return batch
        return replace(
            batch, records=[r for r in batch.records if r.position not in self._done_ahead]
        )

    def _begin(self, call: Call, batch: ReadResult | None = None) -> Call:
        self._call = call
        if isinstance(call, Deliver) and call.batch.records:  # never gathered into again
            last = call.batch.records[-1].position
            self._delivered_to = max(last, self._delivered_to or last)
        self.progress.begin(batch.records if batch else ())
        return call

    def _bisect(self) -> None:
        """Splits the failing head batch in halves, each tried once; a failing half is
        split again, down to the records that fail on their own (as Lambda's
        BisectBatchOnFunctionError): one poison record costs about 2·log2(n) calls."""
        batch = self._batches.popleft()
        middle = len(batch.records) // 2
        first = ReadResult(batch.records[:middle], batch.millis_behind_latest)
        second = replace(batch, records=batch.records[middle:])
        self._batches.extendleft((second, first))
        self._pieces_ahead = max(self._pieces_ahead - 1, 0) + 2
        self.failures.restart_count()

    def _give_up_old(self, batch: ReadResult) -> Skip | DeadLetter:
        """The head batch's records past maxRecordAgeSeconds go to the policy's last
        resort now, without bisecting (retrying is what they are too old for); the
        younger rest stays behind them, retried as usual."""
        failures = self.failures
        count = failures.too_old
        if count < len(batch.records):
            old = ReadResult(batch.records[:count], batch.millis_behind_latest)
            rest = replace(batch, records=batch.records[count:])
            self._batches.popleft()
            self._batches.extendleft((rest, old))
            if self._pieces_ahead:
                self._pieces_ahead += 1
            batch = old
        error = failures.too_old_error()
        if failures.then is AfterRetries.SKIP:
            return Skip(self._undone(batch), error, failures.count)
        return DeadLetter(self._undone(batch), error, failures.count)

    def _pass_over(self, batch: ReadResult, action: Literal["skip", "deadLetter"]) -> None:
        records = batch.records
        # The head as a whole: the records of it an earlier parallel call did are done too.
        self.progress.passed_over(self._batches[0].records)
        note = PassedOver(
            action=action,
            first_sequence=records[0].sequence_number,
            last_sequence=records[-1].sequence_number,
            count=len(records),
            error=self.failures.error,
        )
        # One note per action until a heartbeat takes it (a poison batch bisected into
        # single records is one note, not one per record). A note already sent is not
        # added to (its answer removes it), unless heartbeats keep failing: then the
        # notes stop growing in number, at the risk of an Event counting some twice.
        notes = self._passed_over
        last = notes[-1] if notes else None
        unsent = len(notes) > self._notes_sent or len(notes) >= MAX_UNREPORTED_NOTES
        if last is not None and last.action == action and unsent:
            notes[-1] = last.merged(note)
        else:
            notes.append(note)
        self._took_head()
        self.failures.recovered()

    def _send(self, request: CheckpointRequest) -> SendCheckpoint:
        self._in_flight = request
        return SendCheckpoint(request)

    def _checkpoint(self, sequence: str) -> CheckpointRequest:
        return CheckpointRequest(
            worker=self.worker, shard_id=self.shard_id, epoch=self.epoch, sequence_number=sequence
        )

    def _closing(self, release: bool) -> CheckpointRequest:
        """The last request of this shard: a release at the newest position (a hand-off),
        or SHARD_END. Sent with wait: the shard is let go once the status holds it."""
        if self._final is None:
            sequence = self.progress.requested if release else SHARD_END
            self._final = CheckpointRequest(
                worker=self.worker,
                shard_id=self.shard_id,
                epoch=self.epoch,
                sequence_number=sequence,
                release=release,
                wait=True,
            )
        return self._final

    def _hands_off_instead(self, request: CheckpointRequest) -> bool:
        """A SHARD_END not taken yet while a planned move waits: the move cannot wait for
        the operator to confirm the shard's end (it waits for a listing newer than our
        claim, which may be slow), so the shard is handed back at the last record done
        and its next owner reads the end again: nothing skipped, nothing replayed
        (docs/design.md#hand-off-on-planned-moves)."""
        return (
            request is self._final
            and request.sequence_number == SHARD_END
            and self._stop is Stop.HANDOFF
        )

    def _release_at_done(self) -> CheckpointRequest:
        done = self.progress.done
        position = done.checkpoint_sequence if done is not None else None
        return CheckpointRequest(
            worker=self.worker,
            shard_id=self.shard_id,
            epoch=self.epoch,
            sequence_number=position or self.progress.stored,
            release=True,
            wait=True,
        )

    def _finish(self, outcome: Outcome) -> Finished:
        self._enter(Phase(outcome.value))
        return Finished(outcome)

    def _enter(self, phase: Phase) -> None:
        assert phase in TRANSITIONS[self._phase], f"{self.shard_id}: {self._phase} to {phase}"
        self._phase = phase

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def outcome(self) -> Outcome | None:
        """How the shard was let go; None while it is held."""
        return Outcome(self._phase.value) if self._phase in FINISHED else None

    def _took_head(self) -> None:
        head = self._batches.popleft()
        self._took(head)
        self._pieces_ahead = max(self._pieces_ahead - 1, 0)
        if self._done_ahead and head.records:
            last = head.records[-1].position
            self._done_ahead = frozenset(p for p in self._done_ahead if p > last)

    def _took(self, batch: ReadResult) -> None:
        if batch.millis_behind_latest is not None:
            # Beyond the wire's bound only a broken clock or reader: report the bound.
            self.millis_behind = min(batch.millis_behind_latest, MAX_MILLIS_BEHIND)

    # --- what happened -------------------------------------------------------------------

    def returned(self, now: float) -> None:
        """The processor call from the last step returned."""
        call = self._end_call()
        if isinstance(call, Skip):
            self._pass_over(call.batch, "skip")
            return
        if isinstance(call, DeadLetter):  # written: the batch is passed over
            self._pass_over(call.batch, "deadLetter")
            return
        self.progress.returned()
        self.failures.recovered()
        if isinstance(call, Initialize):
            self._enter(Phase.PROCESSING)
        elif isinstance(call, Deliver):
            self._took_head()
        elif isinstance(call, EndShard):
            self._enter(Phase.ENDING)
        elif isinstance(call, Shutdown):
            self._enter(Phase.SHUT_DOWN)
        elif isinstance(call, LoseLease):
            self._finish(Outcome.LOST)

    def raised(self, now: float, error: str = "", wall: float | None = None) -> None:
        """The call from the last step raised `error`: nothing it did counts. `wall`: the
        time (seconds since the epoch) for the records' age (maxRecordAgeSeconds)."""
        call = self._end_call()
        if isinstance(call, DeadLetter):  # the target failed: write again after a back-off
            self.failures.letters_failed(now, call.error, error)
            return
        self.progress.raised()
        if isinstance(call, Shutdown):
            self._enter(Phase.SHUT_DOWN)  # release at the last position that returned
        elif isinstance(call, LoseLease):
            self._finish(Outcome.LOST)
        else:  # retried after a back-off, unless a hand-off or a loss comes first
            self._failed(now, error, wall if isinstance(call, Deliver) else None)

    def partly_failed(
        self,
        now: float,
        done: int,
        error: str,
        wall: float | None = None,
        ahead: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        """The Deliver call from the last step returned, reporting its batch's records
        from index `done` on failed (a partial batch response). The records before are
        done; the rest become the head batch, failed once, retried after a back-off and
        then given to the failure policy as a batch that raised (as Lambda retries from
        the first failed record). A call that asked to checkpoint past the first failed
        record counts as failed whole. `ahead`: the positions of the records after index
        `done` that are done all the same (a parallel call's other groups, and those the
        Deliver named done), never delivered again."""
        call = self._call
        assert isinstance(call, Deliver), "only process_records reports failed records"
        records = call.batch.records
        assert 0 <= done < len(records), f"{done} records done of {len(records)}"
        self._end_call()
        try:
            self.progress.partly_returned(records[done - 1] if done else None)
        except CheckpointError as refused:
            self._failed(now, f"{error}, yet {refused}", wall)
            return
        self._done_ahead |= ahead
        self.failures.letters_due_again(self._done_ahead)
        if done:  # progress: what is left is a new head, failed once (its count starts over)
            self._batches[0] = replace(self._batches[0], records=records[done:])
            self.failures.recovered()
        self._failed(now, error, wall)

    def interrupted(self, done: int, ahead: frozenset[tuple[int, int]] = frozenset()) -> None:
        """The Deliver call from the last step stopped short, as `part_begins` said: its
        batch's first `done` records are done, and those at the positions `ahead`; the
        rest are the head batch again, not failed. What comes next is the hand-off, the
        loss, or once the fence is renewed, the rest of the batch."""
        call = self._call
        assert isinstance(call, Deliver), "only a Deliver's calls are cut short"
        records = call.batch.records
        assert 0 <= done < len(records), f"{done} records done of {len(records)}"
        self._end_call()
        try:  # (its calls' checkpoints store nothing: the one asked for is the watermark)
            self.progress.partly_returned(records[done - 1] if done else None)
        except CheckpointError:  # never past the watermark; if it were, nothing counts
            self.progress.raised()
            return
        self._done_ahead |= ahead
        if done:  # progress: the rest never failed (as partly_failed: its count starts over)
            self._batches[0] = replace(self._batches[0], records=records[done:])
            self.failures.recovered()

    def _failed(self, now: float, error: str, wall: float | None = None) -> None:
        too_old = None
        if wall is not None:  # (a Deliver: its records' ages count)
            head = self._batches[0].records if self._batches else []
            too_old = self.failures.records_too_old(head, wall)
        self.failures.failed(now, error, too_old)

    def cannot_dead_letter(self, now: float, reason: str) -> None:
        """The DeadLetter call found a letter its target can never hold (`reason` names
        the record): the batch blocks the shard as under `block`, reported and retried
        by the processor until it returns, or a hand-off or loss comes."""
        call = self._end_call()
        assert isinstance(call, DeadLetter), "only a dead-letter write is refused so"
        self.failures.letters_refused(
            now, reason, frozenset(r.position for r in call.batch.records)
        )

    def answered(self, answer: Answer, now: float) -> None:
        """The operator's answer to the request from the last SendCheckpoint."""
        request, self._in_flight = self._in_flight, None
        assert request is not None, "answered without a request in flight"
        if answer is Answer.UNREACHABLE:
            # Pause (the fence stops deliveries if this lasts), then ask again.
            self._retry_send_at = now + min(1.0, 0.05 * 2 ** min(self._send_failures, 5))
            self._send_failures += 1
            if self._hands_off_instead(request):
                self._final = self._release_at_done()
            return
        self._send_failures = 0
        if request is self._final:
            if answer is Answer.ACCEPTED:  # not saved yet: a restart would lose it
                self._retry_send_at = now + RESEND_UNSAVED_SECONDS
            elif answer is Answer.INVALID and request.sequence_number == SHARD_END:
                # The operator's listing shows the shard open (a reshard it has not
                # listed yet, or our reader ended too soon): hand the shard back at the
                # last record done instead, so it is read on from there, never skipped.
                self._final = self._release_at_done()
            else:  # saved, or refused because it is no longer ours: let go either way
                self._finish(Outcome.RELEASED if request.release else Outcome.ENDED)
        elif answer in (Answer.ACCEPTED, Answer.SAVED):
            assert request.sequence_number is not None
            self.progress.accepted(request.sequence_number)
        else:
            self.revoke(Stop.LOST)  # refused: stop without storing anything more

    # --- after it finished ---------------------------------------------------------------

    def last_request(self) -> CheckpointRequest:
        """What to send again if the operator still counts the shard as ours under this
        epoch after we let go (its status lost our last word): the release or SHARD_END,
        or, after a loss, a release without a position."""
        return self._final or CheckpointRequest(
            worker=self.worker, shard_id=self.shard_id, epoch=self.epoch, release=True
        )
