"""The record-processor API: what a user writes to consume a stream.

Write a class in the KCL v2 shape — one instance per shard, called in this order:

    initialize(shard)                         once, before any record
    process_records(records, checkpointer)    for each batch, in sequence order
    ... then exactly one of:
    shard_ended(checkpointer)                 the shard is closed and every batch has
                                              returned: flush what you buffer; once this
                                              returns the worker stores SHARD_END and
                                              the shard's children can start
    shutdown_requested(checkpointer)          the worker is stopping, or the shard moves
                                              to another worker (hand-off): checkpoint
                                              what you have finished
    lease_lost()                              another worker owns the shard now; what
                                              you checkpoint is no longer stored

or just a function `def handle(records: list[Record]) -> None`: the worker checkpoints
after each batch that returns. A processor that raises is called again with the same
batch after a back-off, until it returns or the shard moves (a hand-off interrupts the
retries); a record is never skipped.

Partial batch response (as Lambda's ReportBatchItemFailures): `process_records` (or the
function) may return the records that failed, as `BatchResult(failed=[...])` or a plain
list, naming each by its Record or its sequence number. The records before the first
failed one are done; that record and every record after it are delivered again, alone,
after a back-off, and go through the failure policy exactly as a batch that raised:
per-shard order is kept, and records already done are not delivered again. Returning
None or an empty list means the whole batch is done. A result that does not fit (a
sequence number not in the batch, an item that is neither a Record nor a string, any
other type) is an error: the whole batch counts as failed, as if the call had raised.
A checkpoint asked for in that call must not cover the first failed record (the call
then counts as failed as a whole too).

With `spec.processor.parallelism` above 1, process_records is called on several groups
of a batch at once, from several threads, each key's records in one group in order: it
must be thread-safe. The worker then checkpoints itself, at the first record not yet
done; a checkpoint asked for inside such a call may name only that call's records and
stores nothing (docs/parallelism.md). So it does with `spec.processor.batchSize`, which
cuts a read into calls of at most that many records.

Records that `spec.processor.filter` drops never reach the processor: a checkpoint at a
later record covers them, and the worker checkpoints past those at the end of a read.

Any lifecycle method may be `async def`, and so may the function (`async def
handle(records)`): the worker runs every async call of the process on one event loop in
a thread of its own, so its shards' calls share that loop and what lives on it (a client
session, a connection pool), and waits for each call as for any other. A coroutine must
not block that loop (`time.sleep`, a blocking client): every shard's calls would wait.
A checkpointer given to an async call refuses checkpoints once the call has returned
(from a task it left running). See streamconsumer.awaiting.

Checkpoints are forward-only and never pass a record that was not delivered to you:
checkpoint() records that every record delivered so far is done; checkpoint(record)
that everything up to and including `record` is done. The worker stores a checkpoint
once the call that made it returns; if the call raises, the checkpoint is dropped with
the batch, which is delivered again.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from streamconsumer.core.lineage import SHARD_END as SHARD_END  # re-exported: a public name here
from streamconsumer.event_loop import ProcessorExited as ProcessorExited  # a public name here
from streamconsumer.event_loop import process_loop


@dataclass(frozen=True, slots=True)
class Record:
    """One user record. After de-aggregation of KPL records several share a
    `sequence_number` and are told apart by `sub_sequence_number`.

    From a DynamoDB stream (`source.dynamodbStreams`) a record is one item change:
    `event_name` is INSERT, MODIFY or REMOVE; `keys`, `new_image` and `old_image` are the
    item's key and images as Python values (numbers as Decimal; an image is None when the
    change has none or the stream's view type leaves it out); `partition_key` is the
    item's key as a string, so records of one item share it; `approximate_arrival_timestamp`
    is the change's ApproximateCreationDateTime; `data` is the raw stream record as JSON.
    These fields are None for Kinesis records."""

    data: bytes
    partition_key: str
    sequence_number: str
    approximate_arrival_timestamp: datetime | None = None
    sub_sequence_number: int | None = None
    explicit_hash_key: str | None = None
    # What a checkpoint at this record may store: its sequence number once every
    # sub-record of its aggregate is done, otherwise the last complete one before it.
    checkpoint_sequence: str | None = field(default=None, repr=False, compare=False)
    # DynamoDB Streams only (left out of equality and hashing: they are in `data` too).
    event_name: str | None = field(default=None, compare=False)
    keys: dict[str, Any] | None = field(default=None, compare=False)
    new_image: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    old_image: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def position(self) -> tuple[int, int]:
        """Total order of records within a shard."""
        return int(self.sequence_number), self.sub_sequence_number or 0


@dataclass(frozen=True, slots=True)
class ShardInfo:
    shard_id: str
    start_sequence: str | None  # the checkpoint resumed from, if any
    parents: tuple[str, ...] = ()


class CheckpointError(ValueError):
    """A checkpoint that would go backwards or past what was delivered."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What `process_records` may return: the records of its batch that failed, each as
    its Record or its sequence number (a sequence number shared by the sub-records of a
    KPL aggregate names the first of them). Processing resumes at the first failed one."""

    failed: Collection[Record | str] = ()


# What process_records may return: None (all done) or a BatchResult. Only a BatchResult
# reports failures: any other value means all done, as it did before partial responses
# existed, so a processor that returns a count or its transformed records keeps working.
ProcessResult = BatchResult | None


class BatchResultError(TypeError):
    """process_records returned something that is not a batch result for its batch: the
    whole batch counts as failed."""


class NotAwaitedError(TypeError):
    """A lifecycle method returned a coroutine (or another awaitable) that nothing awaits:
    a method the worker cannot tell is async (a decorated one), or a missing `await`.
    The call counts as failed, never as done."""


def refuse_awaitable(result: object, method: str) -> None:
    """Raises NotAwaitedError if `result`, what `method` returned, is an awaitable."""
    if inspect.isawaitable(result) or inspect.isasyncgen(result):
        if inspect.iscoroutine(result):
            result.close()  # (no "never awaited" warning on top of the error)
        raise NotAwaitedError(
            f"{method} returned a {type(result).__name__} that nothing awaits: write it "
            "`async def` (streamconsumer.awaiting), or await what it calls"
        )


def first_failed(records: Sequence[Record], result: object) -> int:
    """The index in `records` of the first record `result` reports failed; len(records)
    when none did. Raises BatchResultError when `result` does not fit the batch: a failure
    is never read as a success, and an unknown name never as a skip."""
    refuse_awaitable(result, "process_records")
    if not isinstance(result, BatchResult):
        return len(records)  # None, or a value that reports nothing (see ProcessResult)
    failed: object = result.failed
    if isinstance(failed, (str, bytes)) or not isinstance(failed, Collection):
        raise BatchResultError(
            f"BatchResult.failed is a {type(failed).__name__}; expected a list of records "
            "or sequence numbers"
        )
    by_position = {record.position: i for i, record in enumerate(records)}
    by_sequence: dict[str, int] = {}
    for i, record in enumerate(records):
        by_sequence.setdefault(record.sequence_number, i)
    first = len(records)
    for item in failed:
        if isinstance(item, Record):
            index = by_position.get(item.position)
        elif isinstance(item, str):
            index = by_sequence.get(item)
        else:
            raise BatchResultError(
                f"process_records reported a failed {type(item).__name__} ({item!r}); "
                "expected a Record or a sequence number (str)"
            )
        if index is None:
            name = item.sequence_number if isinstance(item, Record) else item
            raise BatchResultError(
                f"process_records reported record {name} failed, which is not in its batch "
                f"({records[0].sequence_number}..{records[-1].sequence_number})"
                if records
                else f"process_records reported record {name} failed in an empty batch"
            )
        first = min(first, index)
    return first


class Progress:
    """Where processing of one shard stands. The worker runtime (or a test harness) drives
    it around each processor call; the processor sees it through its Checkpointer.

    A record handed to `process_records` is *delivered*; it is *done* once that call
    returned without raising. A checkpoint may name any delivered record while the call
    runs; a call that raises leaves no trace (its records are not done, and what it asked
    to checkpoint is forgotten), so no path checkpoints a record that is not done."""

    def __init__(self, shard_id: str, start_sequence: str | None = None) -> None:
        self.shard_id = shard_id
        self.requested = start_sequence  # the newest checkpoint asked for
        self.stored = start_sequence  # the newest one the operator accepted
        self._delivered: Record | None = None
        self._done: Record | None = None
        self._at_shard_end = False
        self._before_call: str | None = None
        # The position of the last record the processor's checkpoints (and the records
        # passed over after them) cover: a checkpoint's sequence number cannot say it
        # inside a KPL aggregate, where it stays at the aggregate before.
        self._through: tuple[int, int] | None = None
        self._through_before: tuple[int, int] | None = None

    @property
    def done(self) -> Record | None:
        """The last record whose processing returned."""
        return self._done

    # --- around processor calls (the runtime) -----------------------------------------

    def begin(self, records: Sequence[Record] = ()) -> None:
        """A lifecycle call starts; `records` are delivered by it."""
        self._before_call, self._through_before = self.requested, self._through
        if records:
            self._delivered = records[-1]

    def returned(self) -> None:
        self._done = self._delivered

    def raised(self) -> None:
        self._delivered = self._done
        self.requested, self._through = self._before_call, self._through_before

    def partly_returned(self, last_done: Record | None) -> None:
        """The call returned, reporting the records after `last_done` failed (None: all
        of them): those are delivered again, the ones before are done. Raises
        CheckpointError, and counts the call as raised, if it asked for a checkpoint
        past `last_done` (by its sequence number, or by the part of a KPL aggregate it
        named): a checkpoint never covers a record reported failed."""
        if last_done is not None:
            limit = last_done.checkpoint_sequence
        else:
            limit = self._done.checkpoint_sequence if self._done else self.stored
        asked = self.requested
        last = last_done or self._done
        through = self._through
        if (asked != self._before_call and (limit is None or int(asked or 0) > int(limit))) or (
            through != self._through_before
            and through is not None
            and (last is None or through > last.position)
        ):
            self.raised()
            raise CheckpointError(
                f"{self.shard_id}: checkpoint {asked} asked for in a call that reported "
                f"records after {limit} failed"
            )
        if last_done is not None:
            self._done = last_done
        self._delivered = self._done

    def passed_over(self, records: Sequence[Record]) -> None:
        """The failure policy skipped or dead-lettered these delivered records, or the
        filter dropped these (never delivered): they count as done. The checkpoint moves
        past them only if the processor had checkpointed everything done before them:
        records a batching processor has not flushed yet are never passed by a
        checkpoint it did not ask for."""
        done, through = self._done, self._through
        caught_up = done is None or (through is not None and through >= done.position)
        self._delivered = self._done = records[-1]
        position = records[-1].checkpoint_sequence
        if caught_up:
            self._through = records[-1].position
            if position is not None:  # None: inside a first KPL aggregate
                self.requested = position

    def shard_ended(self) -> None:
        """Every record of the closed shard is done: a bare checkpoint() is SHARD_END."""
        self._at_shard_end = True

    def pending(self) -> str | None:
        """A checkpoint asked for and not yet accepted by the operator."""
        return self.requested if self.requested != self.stored else None

    def accepted(self, value: str) -> None:
        self.stored = value

    # --- what the processor asks (through its Checkpointer) ---------------------------

    def request(self, at: Record | str | None) -> None:
        if at is None and self._at_shard_end:
            self.requested = SHARD_END
            return
        target = self._sequence_for(at)
        current = self.requested
        comparable = target is not None and current not in (None, SHARD_END)
        if comparable and int(target or 0) < int(current or 0):
            raise CheckpointError(f"{self.shard_id}: checkpoint {target} is behind {current}")
        through = self._covered_by(at)
        if through is not None and (self._through is None or through > self._through):
            self._through = through
        if target is None:
            return  # nothing delivered, or only part of a first aggregate: nothing to store
        if current is None or current == SHARD_END or int(target) > int(current):
            self.requested = target

    def _covered_by(self, at: Record | str | None) -> tuple[int, int] | None:
        """The position of the last record a checkpoint at `at` (valid: `_sequence_for`
        took it) says is done."""
        delivered = self._delivered
        if delivered is None:
            return None
        if at is None:
            return delivered.position
        if isinstance(at, Record):
            return at.position
        if int(at) == int(delivered.sequence_number):
            return delivered.position  # its aggregate as far as it was delivered
        return int(at), sys.maxsize  # every part of that record

    def _sequence_for(self, at: Record | str | None) -> str | None:
        delivered = self._delivered
        if at is None:
            return delivered.checkpoint_sequence if delivered else None
        if isinstance(at, Record):
            if delivered is None or at.position > delivered.position:
                raise CheckpointError(f"{self.shard_id}: record {at.position} was not delivered")
            return at.checkpoint_sequence
        if not at.isdigit():
            raise CheckpointError(f"{self.shard_id}: {at!r} is not a sequence number")
        if delivered is None or int(at) > int(delivered.sequence_number):
            raise CheckpointError(f"{self.shard_id}: sequence {at} was not delivered")
        if int(at) == int(delivered.sequence_number) and delivered.sub_sequence_number is not None:
            # The aggregate delivered last may be delivered in part (a bisected batch ends
            # inside it): its sequence number would cover the rest. Store what the record
            # form stores: the aggregate once it is whole, else the last complete position.
            return delivered.checkpoint_sequence
        return at


class Checkpointer:
    """Records progress for one shard. The worker hands it to every lifecycle call and
    stores what it records after the call returns (a call that raises stores nothing)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.shard_id = progress.shard_id

    @property
    def last_checkpoint(self) -> str | None:
        """The newest checkpoint recorded (stored, or to be stored when the call returns)."""
        return self._progress.requested

    def checkpoint(self, at: Record | str | None = None) -> None:
        """Checkpoint everything delivered so far, or up to and including `at`.

        Inside `shard_ended`, a bare checkpoint() marks the shard finished (SHARD_END)."""
        self._progress.request(at)


@runtime_checkable
class RecordProcessor(Protocol):
    """The KCL-v2-shaped processor. Subclass `BaseRecordProcessor` for the defaults."""

    def initialize(self, shard: ShardInfo) -> None: ...
    def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult: ...
    def lease_lost(self) -> None: ...
    def shard_ended(self, checkpointer: Checkpointer) -> None: ...
    def shutdown_requested(self, checkpointer: Checkpointer) -> None: ...


class BaseRecordProcessor:
    """Defaults: checkpoint at shard end and on shutdown; nothing on initialize or loss."""

    def initialize(self, shard: ShardInfo) -> None:
        self.shard = shard

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        raise NotImplementedError

    def lease_lost(self) -> None:
        return None

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()


class FunctionProcessor(BaseRecordProcessor):
    """The plain-function form: call `handle(records)`, checkpoint when it returns (up to
    the record before the first one it reports failed, if it returns a batch result)."""

    def __init__(self, handle: Callable[[list[Record]], ProcessResult]) -> None:
        self.handle = handle

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        result = self.handle(list(records))  # its own copy: ours names what failed
        if inspect.isawaitable(result):  # (an async callable object, a decorated function)
            result = process_loop().run(result)
        checkpoint_what_returned(records, result, checkpointer)
        return result


def checkpoint_what_returned(
    records: Sequence[Record], result: object, checkpointer: Checkpointer
) -> None:
    """A function's checkpoint once it returned `result` for `records`: all of them, or
    up to the record before the first one it reports failed."""
    failed = first_failed(records, result)
    if failed == len(records):
        checkpointer.checkpoint()
    elif failed:
        checkpointer.checkpoint(records[failed - 1])


ProcessorFactory = Callable[[], RecordProcessor]
LIFECYCLE = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")


def warm_up(factory: ProcessorFactory) -> None:
    """Runs the processor's optional `warm_up()` once, before the worker takes any lease,
    so slow starts (a JVM, a model, a connection pool) never eat into a lease."""
    hook = getattr(factory(), "warm_up", None)
    if callable(hook):
        hook()
