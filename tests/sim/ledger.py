"""Everything the simulated consumer did to the stream's records, and the invariants of
docs/design.md#invariants checked as it happens. A breach raises Violation at its event.

- single owner: deliveries of a shard never go back to an older epoch, an
  epoch is one worker's, and two workers never run processor calls on a shard at once
  (unless the earlier call outlived its fence in a process pause: a zombie);
- only what returned is checkpointed: an accepted checkpoint never passes a
  record that is not done; records are first done in shard order (nothing skipped), or
  under processor.parallelism in the order of their key;
- paused means paused: no batch is delivered once a pause has had time to settle;
- parents first: a shard's first delivery comes after every record of its
  parents is done;
- lineage remembered: a shard whose SHARD_END was saved is never delivered again;
- forward-only and durable: saved checkpoints never go back, but for a reset,
  after which the next owner's first batch starts exactly at the reset's position;
- at the end: nothing lost (liveness), and no duplicate when every fault was planned
  (but of records a parallel call did after a record that failed: the checkpoint cannot
  pass that one, so a planned move replays them, docs/design.md#per-key-parallelism).

With `initialPosition: LATEST` the records that arrived before the consumer was created
(simulated time 0) are not owed; every record after is, however early a shard moves."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sim.stream import SimShard, SimStream
from sim.world import simulated
from streamconsumer.core.lineage import SHARD_END, expand


class Violation(AssertionError):
    pass


def _next_epoch(lease: dict[str, Any] | None) -> int:
    """The first epoch of the owner after a reset, from the first status that holds it:
    the one after the lease's, unless the reset is carried out and granted already (a
    grant leaves the operator only once saved: nothing was delivered under it yet)."""
    if lease is None:
        return 1
    epoch = int(lease.get("epoch", 0))
    carried_out = not lease.get("resetting") and lease.get("owner") is not None
    return epoch if carried_out else epoch + 1


PAUSE_SETTLES = 25.0
"""Once paused, deliveries stop within this: a heartbeat brings the hand-off, or the fence
(the longest lease a run uses, 10 s, plus its grace) runs out first."""


@dataclass
class Delivery:
    worker: str
    shard_id: str
    epoch: int
    zombie: bool = False  # the worker was paused during it


@dataclass
class Ledger:
    stream: SimStream
    done_times: Counter[int] = field(default_factory=Counter)
    _next_undone: dict[str, int] = field(default_factory=dict)  # index into shard.sequences
    _epochs: dict[str, tuple[int, str]] = field(default_factory=dict)
    _running: dict[str, list[Delivery]] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)
    _finished_saved: set[str] = field(default_factory=set)
    _saved_checkpoints: dict[str, int] = field(default_factory=dict)
    unplanned: list[str] = field(default_factory=list)
    deliveries: int = 0
    from_latest: bool = False  # initialPosition LATEST: the history is not owed
    retries: int | None = None  # the failure policy's, when it may pass records over
    max_record_age: float | None = None  # onFailure.maxRecordAgeSeconds
    end_at: float | None = None  # spec.end: records that arrived after it are never delivered
    # processor.filter: the records it drops, never delivered, owed no processing
    filtered: Callable[[int], bool] = field(default=lambda _: False)
    raised_times: Counter[int] = field(default_factory=Counter)
    passed: set[int] = field(default_factory=set)  # skipped, dead-lettered or reset past
    ended_early: set[str] = field(default_factory=set)  # shards a buggy reader ended early
    skipped_by_reader: set[int] = field(default_factory=set)  # what such a SHARD_END skipped
    _resets_seen: set[str] = field(default_factory=set)
    _reset_shards: set[str] = field(default_factory=set)
    # shard -> (from this epoch on, the sequence the first delivery must start with)
    _reset_expected: dict[str, tuple[int, float]] = field(default_factory=dict)
    paused_since: float | None = None  # spec.paused set at this time (and still set)
    # processor.parallelism: a record's key, whose records are done in order (None: the
    # shard's records are done in order)
    key_of: Callable[[int], int] | None = None
    done_ahead: set[int] = field(default_factory=set)  # done past a record that failed
    _done_under: dict[int, tuple[str, int]] = field(default_factory=dict)  # shard, epoch
    # shard -> index of its first record still owed when its current epoch began
    _owed_from: dict[str, int] = field(default_factory=dict)
    # a record done ahead, done again by a new owner that started behind it: the replay
    # a planned move may make (docs/design.md#per-key-parallelism), counted per record
    _replayed_ahead: Counter[int] = field(default_factory=Counter)

    def _first_owed(self, shard_id: str) -> int:
        """Index of the shard's first record the consumer owes (0 but under LATEST)."""
        shard = self._shard(shard_id)
        if not self.from_latest or shard.parents:
            return 0
        return bisect.bisect_left(shard.arrivals, 0.0)

    def _shard(self, shard_id: str) -> SimShard:
        shard = self.stream.shards.get(shard_id) or self.stream.trimmed.get(shard_id)
        assert shard is not None, shard_id
        return shard

    def _all_done(self, shard_id: str) -> bool:
        shard = self._shard(shard_id)
        pointer = self._pointer(shard_id)
        return all(
            s in self.skipped_by_reader or not self._owed(s) for s in shard.sequences[pointer:]
        )

    # --- deliveries (processor calls) --------------------------------------------------

    def begin(self, worker: str, shard_id: str, epoch: int, records: Iterable[str]) -> Delivery:
        records = list(records)
        dropped = [r for r in records if self.filtered(int(r))]
        if dropped:
            raise Violation(f"{shard_id}: {worker} delivers {dropped[0]}, which the filter drops")
        past = [r for r in records if self._past_end(int(r))]
        if past:
            raise Violation(f"{shard_id}: {worker} delivers {past[0]}, which came after the end")
        paused = self.paused_since
        if records and paused is not None and self.stream.world.now - paused > PAUSE_SETTLES:
            raise Violation(f"{shard_id}: {worker} delivers while the consumer is paused")
        if shard_id in self._finished_saved:
            raise Violation(f"{shard_id}: delivered again after its SHARD_END was saved")
        last = self._epochs.get(shard_id)
        if last is not None:
            if epoch < last[0]:
                raise Violation(f"{shard_id}: {worker} delivers under epoch {epoch} after {last}")
            if epoch == last[0] and worker != last[1]:
                raise Violation(f"{shard_id}: epoch {epoch} used by {last[1]} and {worker}")
        if last is None or epoch > last[0]:
            self._owed_from[shard_id] = self._pointer(shard_id)
        self._epochs[shard_id] = (epoch, worker)
        expected = self._reset_expected.get(shard_id)
        if expected is not None and epoch >= expected[0] and records:
            del self._reset_expected[shard_id]
            # The first record that arrived at or after the reset's instant, which may
            # have arrived only after the reset was saved.
            arrivals, sequences = self._shard(shard_id).arrivals, self._shard(shard_id).sequences
            index = bisect.bisect_left(arrivals, expected[1])
            while index < len(sequences) and self.filtered(sequences[index]):
                index += 1  # never delivered: the first kept record is
            owed = sequences[index] if index < len(sequences) else None
            if int(records[0]) != owed:
                raise Violation(f"{shard_id}: reset to {owed}, resumed at {records[0]} instead")
        for other in self._running.get(shard_id, []):
            if other.worker != worker and not other.zombie:
                raise Violation(f"{shard_id}: {worker} and {other.worker} deliver at once")
        if shard_id not in self._started:
            self._started.add(shard_id)
            shard = self._shard(shard_id)
            for parent in shard.parents:
                if parent in self.stream.shards and not self._all_done(parent):
                    raise Violation(f"{shard_id} started before its parent {parent} was done")
            for first in shard.waits_for:  # an old stream's shard, before the new stream's
                if first in self.stream.shards and not self._all_done(first):
                    raise Violation(f"{shard_id} started before the old stream's {first} was done")
        call = Delivery(worker, shard_id, epoch)
        self._running.setdefault(shard_id, []).append(call)
        if records:
            self.deliveries += 1
        return call

    def end(self, call: Delivery) -> None:
        self._running[call.shard_id].remove(call)

    def paused(self, worker: str) -> None:
        """A process pause: its calls in progress may outlive their fence."""
        for calls in self._running.values():
            for call in calls:
                if call.worker == worker:
                    call.zombie = True

    def done(self, shard_id: str, sequences: Iterable[int]) -> None:
        """Records whose processing returned (or whose batch the sink committed)."""
        sequences = list(sequences)
        epoch = self._epochs.get(shard_id, (0, ""))[0]
        for sequence in sequences:
            if sequence in self.done_ahead and self._done_under.get(sequence) == (shard_id, epoch):
                raise Violation(f"{shard_id}: {sequence} done again by its owner (epoch {epoch})")
            if (
                sequence in self.done_ahead
                and self.done_times[sequence]
                and self._behind(shard_id, sequence)
            ):
                self._replayed_ahead[sequence] += 1
            self._done_under[sequence] = (shard_id, epoch)
        if self.key_of is not None:
            self._advance_by_key(shard_id, [s for s in sequences if s not in self.passed])
        else:
            self._advance(shard_id, [s for s in sequences if s not in self.passed])
        self.done_times.update(sequences)

    def _advance(self, shard_id: str, sequences: list[int]) -> None:
        """Records done for the first time: they must come in shard order (records the
        policy passed over may go ahead of records a batching sink has not committed)."""
        shard = self._shard(shard_id)
        first_owed = self._first_owed(shard_id)
        pointer = self._past_passed(shard, self._next_undone.get(shard_id, first_owed))
        first_time = [s for s in dict.fromkeys(sequences) if not self.done_times[s]]
        for sequence in first_time:
            if sequence in self.passed:
                continue
            index = bisect.bisect_left(shard.sequences, sequence)
            if index < first_owed:
                continue  # history from before the start, not owed: order is not checked
            if index != pointer:
                expected = shard.sequences[pointer] if pointer < len(shard.sequences) else None
                raise Violation(f"{shard_id}: {sequence} done first, before {expected}")
            pointer = self._past_passed(shard, pointer + 1)
        self._next_undone[shard_id] = pointer

    def _advance_by_key(self, shard_id: str, sequences: list[int]) -> None:
        """As `_advance`, with each key's records in order: a record done for the first
        time comes after every owed record of its key before it."""
        key_of = self.key_of
        assert key_of is not None
        shard = self._shard(shard_id)
        first_owed = self._first_owed(shard_id)
        pointer = self._pointer(shard_id)
        first_time = [s for s in dict.fromkeys(sequences) if not self.done_times[s]]
        done_now: set[int] = set()
        for sequence in first_time:
            index = bisect.bisect_left(shard.sequences, sequence)
            if index < first_owed:
                continue
            for earlier in reversed(shard.sequences[pointer:index]):
                if key_of(earlier) != key_of(sequence) or not self._owed(earlier):
                    continue
                if not self.done_times[earlier] and earlier not in done_now:
                    raise Violation(
                        f"{shard_id}: {sequence} done first, before {earlier} of its key"
                    )
                break  # that one came after the ones before it
            done_now.add(sequence)
        while pointer < len(shard.sequences) and shard.sequences[pointer] in done_now:
            pointer = self._past_passed(shard, pointer + 1)
        self._next_undone[shard_id] = pointer

    def _behind(self, shard_id: str, sequence: int) -> bool:
        """Was a record before `sequence` still owed when the shard's owner started? Only
        then could no checkpoint cover `sequence`, done ahead of it."""
        index = bisect.bisect_left(self._shard(shard_id).sequences, sequence)
        return index > self._owed_from.get(shard_id, 0)

    def _past_passed(self, shard: SimShard, pointer: int) -> int:
        """Past records not owed (and, under parallelism, records done ahead of others)."""
        while pointer < len(shard.sequences) and (
            not self._owed(shard.sequences[pointer])
            or (self.key_of is not None and self.done_times[shard.sequences[pointer]] > 0)
        ):
            pointer += 1
        return pointer

    def _owed(self, sequence: int) -> bool:
        return (
            sequence not in self.passed
            and not self.filtered(sequence)
            and not self._past_end(sequence)
        )

    def _past_end(self, sequence: int) -> bool:
        return self.end_at is not None and self.stream.arrived[sequence] > self.end_at

    def _pointer(self, shard_id: str) -> int:
        """The index of the shard's first record still owed."""
        first = self._next_undone.get(shard_id, self._first_owed(shard_id))
        return self._past_passed(self._shard(shard_id), first)

    def raised(self, sequences: Iterable[int]) -> None:
        """A delivery of these records raised."""
        self.raised_times.update(sequences)

    def passed_over(self, shard_id: str, sequences: list[int]) -> None:
        """The failure policy skipped or dead-lettered these records: done, by policy,
        and only once they failed as often as the policy retries
        (docs/design.md#only-what-returned-is-checkpointed)."""
        if self.retries is None:
            raise Violation(f"{shard_id}: records passed over under policy block")
        for sequence in sequences:
            if self.raised_times[sequence] <= self.retries and not self._too_old(sequence):
                raise Violation(
                    f"{shard_id}: {sequence} passed over after "
                    f"{self.raised_times[sequence]} failures (retries: {self.retries})"
                )
        self.passed.update(sequences)
        shard = self._shard(shard_id)
        pointer = self._next_undone.get(shard_id, self._first_owed(shard_id))
        self._next_undone[shard_id] = self._past_passed(shard, pointer)

    def _too_old(self, sequence: int) -> bool:
        """Failed, and past maxRecordAgeSeconds now: passed over without its retries."""
        limit = self.max_record_age
        age = self.stream.world.now - self.stream.arrived[sequence]
        return limit is not None and self.raised_times[sequence] > 0 and age >= limit

    # --- checkpoints -------------------------------------------------------------------

    def accepted(self, shard_id: str, checkpoint: str | None) -> None:
        """The operator now holds `checkpoint` for the shard (in memory)."""
        if checkpoint is None or shard_id not in self.stream.shards:
            return
        shard = self._shard(shard_id)
        pointer = self._pointer(shard_id)
        if checkpoint == SHARD_END:
            if shard.closed_at is None:  # ends only where a bounded consumer does
                if self.end_at is None:
                    raise Violation(f"{shard_id}: SHARD_END with records not done (open shard)")
                if self.stream.world.now <= self.end_at:
                    raise Violation(f"{shard_id}: a bounded consumer's SHARD_END before its end")
            if pointer < len(shard.sequences):
                if shard_id not in self.ended_early:
                    raise Violation(f"{shard_id}: SHARD_END with records not done")
                # The known limit (docs/design.md#one-bad-client-hurts-only-itself): a
                # reader that ended an open shard early, the shard closed since; the
                # operator cannot tell its SHARD_END from a true one.
                self.skipped_by_reader.update(shard.sequences[pointer:])
        elif pointer < len(shard.sequences) and int(checkpoint) >= shard.sequences[pointer]:
            raise Violation(
                f"{shard_id}: checkpoint {checkpoint} passes {shard.sequences[pointer]}, not done"
            )

    def saved(self, status: dict[str, Any]) -> None:
        """A status write landed."""
        finished = set(expand(status.get("finishedShards") or []))
        leases = status.get("leases") or {}
        reset = status.get("lastReset")
        if reset is not None and reset["id"] not in self._resets_seen:
            self._resets_seen.add(reset["id"])
            for shard_id in reset["shards"]:
                self._reset_applied(
                    shard_id, _next_epoch(leases.get(shard_id)), reset["to"].get("timestamp")
                )
        for shard_id, lease in leases.items():
            checkpoint = lease.get("checkpoint")
            if checkpoint == SHARD_END:
                finished.add(shard_id)
            elif checkpoint is None and shard_id in self._saved_checkpoints:
                if shard_id not in self._reset_shards:
                    raise Violation(f"{shard_id}: saved checkpoint vanished ({lease})")
                del self._saved_checkpoints[shard_id]
            elif checkpoint is not None and not lease.get("resetting"):
                before = self._saved_checkpoints.get(shard_id, -1)
                if int(checkpoint) < before:
                    raise Violation(f"{shard_id}: saved checkpoint went back to {checkpoint}")
                self._saved_checkpoints[shard_id] = int(checkpoint)
            if shard_id in self._finished_saved and checkpoint != SHARD_END:
                raise Violation(f"{shard_id}: finished, then saved unfinished ({lease})")
            self.accepted(shard_id, checkpoint)
        self._finished_saved |= finished

    def _reset_applied(self, shard_id: str, epoch: int, timestamp: str | None) -> None:
        """The status holds a reset of the shard: its checkpoint starts over, what arrived
        before its position is no longer owed, and the first batch delivered under
        `epoch` or later starts exactly there."""
        self._reset_shards.add(shard_id)
        shard = self._shard(shard_id)
        index = 0
        if timestamp is not None:
            instant = simulated(datetime.fromisoformat(timestamp))
            index = bisect.bisect_left(shard.arrivals, instant)
        waived = [s for s in shard.sequences[:index] if not self.done_times[s]]
        self.passed.update(waived)
        pointer = self._next_undone.get(shard_id, self._first_owed(shard_id))
        self._next_undone[shard_id] = self._past_passed(shard, pointer)
        instant = -math.inf if timestamp is None else simulated(datetime.fromisoformat(timestamp))
        self._reset_expected[shard_id] = (epoch, instant)

    # --- the end -------------------------------------------------------------------------

    def lost(self) -> list[int]:
        """Records never done in shards still in the stream."""
        return [
            sequence
            for shard in self.stream.shards.values()
            for sequence in shard.sequences[self._pointer(shard.id) :]
            if self._owed(sequence) and sequence not in self.skipped_by_reader
        ]

    def expired(self) -> int:
        """Records trimmed by retention before they were done (the stream's loss)."""
        return sum(
            len(shard.sequences) - self._next_undone.get(shard.id, self._first_owed(shard.id))
            for shard in self.stream.trimmed.values()
        )

    def duplicates(self, planned: bool = False) -> int:
        """Records done more than once (`planned`: but the replays a planned move may make
        of records done ahead of one that failed, while the checkpoint could not pass
        them)."""
        return sum(
            times - 1 - (self._replayed_ahead[sequence] if planned else 0)
            for sequence, times in self.done_times.items()
            if times > 1
        )
