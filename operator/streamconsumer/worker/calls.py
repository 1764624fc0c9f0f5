"""The processor calls a ShardMachine asks for, made the same way by every driver (the
threaded runtime, the simulator, tests).

With `processor.parallelism` above 1 a Deliver is fanned out: its records are split by key
(`lanes.split`), each group is one process_records call (or, with `processor.batchSize`,
calls of at most that many records, one after another), and the groups run at once
through the driver's `Fanout` (the runtime's threads, the simulator's deterministic
turns). For the ShardMachine it stays one call: hand-offs, drains, the timeout and the
failure policy wait for or cover every group. The worker then checkpoints the low
watermark itself (`lanes.watermark`); a group's own checkpoints may name only its own
records and move nothing, since they cannot know what the other groups have done
(docs/design.md#per-key-parallelism).

Each of those calls is timed on its own (`onFailure.timeoutSeconds` is per call), and
none begins once the shard is lost or fenced, or, with one group, handed off: the
Deliver then ends early, `Interrupted` (`ShardMachine.part_begins`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from streamconsumer import lifecycle
from streamconsumer.processor import (
    Checkpointer,
    CheckpointError,
    ProcessorExited,
    ProcessorFactory,
    Progress,
    Record,
    RecordProcessor,
    ShardInfo,
)
from streamconsumer.worker import lanes
from streamconsumer.worker.shard import (
    Deliver,
    EndShard,
    Initialize,
    LoseLease,
    ProcessorCall,
    ShardMachine,
    Shutdown,
)


class PartlyFailed(Exception):
    """process_records returned a batch result naming failed records: the first `done`
    records of the batch are done, the rest failed (`ShardMachine.partly_failed`). A
    driver that does not know this exception counts the whole batch as failed, which
    replays records but never skips one."""

    def __init__(
        self,
        records: Sequence[Record],
        done: int,
        ahead: frozenset[tuple[int, int]] = frozenset(),
        cause: Exception | None = None,
    ) -> None:
        self.done = done
        self.ahead = ahead  # positions of records after the first failed one that are done
        failed = records[done:]
        undone = len(failed) - len(ahead)
        raised = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        super().__init__(
            f"process_records left {undone} of {len(records)} records not done{raised}, "
            f"from {failed[0].sequence_number}"
            if ahead or cause is not None
            else f"process_records reported {len(failed)} of {len(records)} records failed, "
            f"from {failed[0].sequence_number}"
        )


class Interrupted(Exception):
    """A Deliver's calls stopped short, none failing: the shard is lost, fenced or handed
    off (`ShardMachine.interrupted`). The first `done` records are done, and those at the
    positions `ahead`."""

    def __init__(self, records: Sequence[Record], done: int, ahead: frozenset[tuple[int, int]]):
        super().__init__(
            f"{len(records) - done - len(ahead)} of {len(records)} records left for later: "
            "the shard is stopping"
        )
        self.done = done
        self.ahead = ahead


class MachineParts:
    """How a driver tells the ShardMachine about each process_records call of a Deliver
    (`part_begins`, `part_ended`), under the driver's lock and on its clock: the
    runtime's lock and monotonic time, the simulation's turn and simulated time."""

    def __init__(
        self,
        machine: ShardMachine,
        clock: Callable[[], float],
        lock: contextlib.AbstractContextManager[object] | None = None,
    ) -> None:
        self._machine = machine
        self._clock = clock
        self._lock = lock if lock is not None else contextlib.nullcontext()

    def begin(self, group: int, whole: bool = True) -> bool:
        with self._lock:
            return self._machine.part_begins(group, self._clock(), whole)

    def end(self, group: int) -> None:
        with self._lock:
            self._machine.part_ended(group, self._clock())


GroupCall = Callable[[], int]  # one group's calls: how many of its records are done


class Stopped(Exception):
    """A group's call raised after its earlier calls (processor.batchSize) did `done`
    records: those stay done, the rest of the group is not."""

    def __init__(self, done: int, cause: Exception) -> None:
        super().__init__(str(cause))
        self.done = done
        self.cause = cause


Fanout = Callable[[Sequence[GroupCall]], list[int | Exception]]  # each call's count, or error


def in_turn(calls: Sequence[GroupCall]) -> list[int | Exception]:
    """A Fanout that runs the groups one after another (a test's, or no threads at hand)."""
    outcomes: list[int | Exception] = []
    for call in calls:
        try:
            outcomes.append(call())
        except Exception as error:
            outcomes.append(error)
        except BaseException as exit_:  # kept: the other groups are still waited for
            outcomes.append(ProcessorExited(f"the processor raised {type(exit_).__name__}"))
    return outcomes


def threaded(pool: ThreadPoolExecutor) -> Fanout:
    """A Fanout running a call's groups at once: the first on the calling thread, the
    others on `pool`; it returns once every group has (a call in flight is never left
    behind: the watchdog times the whole)."""

    def fanout(calls: Sequence[GroupCall]) -> list[int | Exception]:
        futures = [pool.submit(in_turn, [call]) for call in calls[1:]]
        outcomes = in_turn(calls[:1])
        for future in futures:
            outcomes.extend(future.result())
        return outcomes

    return fanout


class GroupCheckpointer(Checkpointer):
    """What one group of a fanned-out call checkpoints with: it checks that a checkpoint
    names a record of its own group and stores nothing, since the worker checkpoints the
    low watermark after the call (a group cannot know what the others have done)."""

    def __init__(self, progress: Progress, group: Sequence[Record]) -> None:
        super().__init__(progress)
        self._positions = {record.position for record in group}
        self._sequences = {record.sequence_number for record in group}

    def checkpoint(self, at: Record | str | None = None) -> None:
        if at is None:
            return
        mine = at.position in self._positions if isinstance(at, Record) else at in self._sequences
        if not mine:
            name = at.sequence_number if isinstance(at, Record) else at
            raise CheckpointError(
                f"{self.shard_id}: checkpoint at {name}, which is not in this call's records "
                "(with processor.parallelism the worker checkpoints what every call has done)"
            )


def call_processor(
    call: ProcessorCall,
    machine: ShardMachine,
    processor: RecordProcessor | None,
    factory: ProcessorFactory,
    fanout: Fanout = in_turn,
    parts: MachineParts | None = None,
) -> RecordProcessor:
    """Makes `call` on the shard's processor (Initialize creates it first) and returns the
    processor; raises what the processor raised, PartlyFailed when process_records reports
    failed records, BatchResultError when what it returned is not a batch result, and
    Interrupted when a Deliver's calls stopped short. `fanout` runs the groups of a
    Deliver under a parallelism above 1; `parts` times their calls (None: the machine,
    unlocked, on the clock of the call's start: a driver without threads or time)."""
    try:
        return _call(call, machine, processor, factory, fanout, parts)
    except Exception:
        raise
    except BaseException as exit_:  # (not the worker's: it is the processor's)
        raise ProcessorExited(f"the processor raised {type(exit_).__name__}") from exit_


def _call(
    call: ProcessorCall,
    machine: ShardMachine,
    processor: RecordProcessor | None,
    factory: ProcessorFactory,
    fanout: Fanout,
    parts: MachineParts | None,
) -> RecordProcessor:
    if isinstance(call, Initialize):
        processor = factory()
        assignment = machine.assignment
        shard = ShardInfo(
            machine.shard_id, assignment.start.sequence_number, tuple(assignment.parents)
        )
        lifecycle.initialize(processor, shard)
        return processor
    assert processor is not None, "initialize comes first"
    checkpointer = machine.checkpointer
    in_groups = machine.parallelism > 1 or machine.batch_size is not None
    if isinstance(call, Deliver) and in_groups and call.batch.records:
        started = machine.call_started or 0.0
        _deliver_in_groups(
            call, machine, processor, fanout, parts or MachineParts(machine, lambda: started)
        )
    elif isinstance(call, Deliver):
        records = call.batch.records
        done = lifecycle.process_records(processor, records, checkpointer)
        if done < len(records):
            raise PartlyFailed(records, done)
    elif isinstance(call, EndShard):
        lifecycle.shard_ended(processor, checkpointer)
    elif isinstance(call, Shutdown):
        lifecycle.shutdown_requested(processor, checkpointer)
    elif isinstance(call, LoseLease):
        lifecycle.lease_lost(processor)
    else:
        raise TypeError(f"not a processor call: {call!r}")
    return processor


def _deliver_in_groups(
    call: Deliver,
    machine: ShardMachine,
    processor: RecordProcessor,
    fanout: Fanout,
    parts: MachineParts,
) -> None:
    """The records not done yet, in groups by key, each one process_records call run by
    `fanout`; then the checkpoint at the low watermark. When no record is done raises the
    first group's error, if one raised; else PartlyFailed, with the records done beyond
    the watermark; Interrupted when calls were not made and none failed."""
    records = call.batch.records
    done = {i for i, record in enumerate(records) if record.position in call.done}
    todo = [i for i in range(len(records)) if i not in done]
    groups = [
        [todo[i] for i in group]
        for group in lanes.split([records[i] for i in todo], machine.parallelism)
    ]

    size = machine.batch_size or len(records)
    cut_short: set[int] = set()  # the groups whose next call was not made

    def run(index: int, group: list[int]) -> int:
        """The group's records in calls of at most `size`, in order, until one fails or
        the machine says no more."""
        mine = [records[i] for i in group]
        finished = 0
        for start in range(0, len(mine), size):
            # A hand-off may stop only after a whole record: a release inside a KPL
            # aggregate would replay its parts done (checkpoint_sequence is the one before).
            last = mine[start - 1] if start else None
            whole = (
                last is None
                or last.sub_sequence_number is None
                or (last.checkpoint_sequence == last.sequence_number)
            )
            if not parts.begin(index, whole):
                cut_short.add(index)
                break
            part = mine[start : start + size]
            checkpointer = GroupCheckpointer(machine.progress, part)
            try:
                did = lifecycle.process_records(processor, part, checkpointer)
            except Exception as error:
                if finished:
                    raise Stopped(finished, error) from error
                raise
            except BaseException as exit_:  # earlier calls' records stay done, as above
                exited = ProcessorExited(f"the processor raised {type(exit_).__name__}")
                if finished:
                    raise Stopped(finished, exited) from exit_
                raise exited from exit_
            finally:
                parts.end(index)
            finished += did
            if did < len(part):
                break
        return finished

    outcomes = fanout([functools.partial(run, i, group) for i, group in enumerate(groups)])
    errors: list[Exception] = []
    for group, outcome in zip(groups, outcomes, strict=True):
        if isinstance(outcome, Stopped):
            done.update(group[: outcome.done])
            errors.append(outcome.cause)
        elif isinstance(outcome, Exception):
            errors.append(outcome)
        else:
            done.update(group[:outcome])
    low = lanes.watermark(len(records), done)
    if low:
        machine.checkpointer.checkpoint(records[low - 1])
    if low == len(records):
        return
    if not done and errors:
        raise errors[0]  # nothing done: as a call that raised
    ahead = frozenset(records[i].position for i in done if i >= low)
    failed = errors or any(
        outcome != len(group) and i not in cut_short
        for i, (group, outcome) in enumerate(zip(groups, outcomes, strict=True))
    )
    if not failed:
        raise Interrupted(records, low, ahead)
    raise PartlyFailed(records, low, ahead, errors[0] if errors else None)
