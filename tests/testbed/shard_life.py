"""One worker's life on a shard without the operator: resume after the last checkpoint,
read to the tip through a processor, shut down. For tests and benchmarks of processors
against the real emulator (the full worker runtime is exercised by the e2e tests)."""

from __future__ import annotations

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import RecordProcessor
from streamconsumer.sources.kinesis import KinesisSource
from streamconsumer.testing import ProcessorHarness


def consume(
    source: KinesisSource,
    shard: str,
    processor: RecordProcessor,
    checkpoints: list[str],
) -> None:
    """Reads `shard` from after `checkpoints[-1]` (or its start) to the tip; each checkpoint
    the processor stores is appended to `checkpoints`."""
    start = (
        StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=checkpoints[-1])
        if checkpoints
        else StartPosition(type=StartPositionType.TRIM_HORIZON)
    )
    harness = ProcessorHarness(processor, shard, start.sequence_number)
    harness.checkpoints = checkpoints
    harness.initialize()
    reader = source.open_reader(shard, start)
    while True:
        result = reader.read()
        harness.process(result.records)
        if not result.records:
            break
    harness.shutdown()
