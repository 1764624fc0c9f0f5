"""The processor calls a ShardMachine asks for, made the same way by every driver (the
threaded runtime, the simulator, tests)."""

from __future__ import annotations

from collections.abc import Sequence

from streamconsumer.processor import (
    ProcessorFactory,
    Record,
    RecordProcessor,
    ShardInfo,
    first_failed,
)
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

    def __init__(self, records: Sequence[Record], done: int) -> None:
        self.done = done
        failed = records[done:]
        super().__init__(
            f"process_records reported {len(failed)} of {len(records)} records failed, "
            f"from {failed[0].sequence_number}"
        )


def call_processor(
    call: ProcessorCall,
    machine: ShardMachine,
    processor: RecordProcessor | None,
    factory: ProcessorFactory,
) -> RecordProcessor:
    """Makes `call` on the shard's processor (Initialize creates it first) and returns the
    processor; raises what the processor raised, PartlyFailed when process_records reports
    failed records, and BatchResultError when what it returned is not a batch result."""
    if isinstance(call, Initialize):
        processor = factory()
        assignment = machine.assignment
        processor.initialize(
            ShardInfo(machine.shard_id, assignment.start.sequence_number, tuple(assignment.parents))
        )
        return processor
    assert processor is not None, "initialize comes first"
    checkpointer = machine.checkpointer
    if isinstance(call, Deliver):
        records = call.batch.records  # the user gets a copy: what it does to it is its own
        done = first_failed(records, processor.process_records(list(records), checkpointer))
        if done < len(records):
            raise PartlyFailed(records, done)
    elif isinstance(call, EndShard):
        processor.shard_ended(checkpointer)
    elif isinstance(call, Shutdown):
        processor.shutdown_requested(checkpointer)
    elif isinstance(call, LoseLease):
        processor.lease_lost()
    else:
        raise TypeError(f"not a processor call: {call!r}")
    return processor
