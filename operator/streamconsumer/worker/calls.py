"""The processor calls a ShardMachine asks for, made the same way by every driver (the
threaded runtime, the simulator, tests)."""

from __future__ import annotations

from streamconsumer.processor import ProcessorFactory, RecordProcessor, ShardInfo
from streamconsumer.worker.shard import (
    Deliver,
    EndShard,
    Initialize,
    LoseLease,
    ProcessorCall,
    ShardMachine,
    Shutdown,
)


def call_processor(
    call: ProcessorCall,
    machine: ShardMachine,
    processor: RecordProcessor | None,
    factory: ProcessorFactory,
) -> RecordProcessor:
    """Makes `call` on the shard's processor (Initialize creates it first) and returns the
    processor; raises what the processor raised."""
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
        processor.process_records(list(call.batch.records), checkpointer)
    elif isinstance(call, EndShard):
        processor.shard_ended(checkpointer)
    elif isinstance(call, Shutdown):
        processor.shutdown_requested(checkpointer)
    elif isinstance(call, LoseLease):
        processor.lease_lost()
    else:
        raise TypeError(f"not a processor call: {call!r}")
    return processor
