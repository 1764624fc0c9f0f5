"""A record processor's lifecycle calls, made the same way by every caller (the worker's
drivers, the simulator, `streamconsumer.testing`): an awaitable that a plain method
returns is refused (NotAwaitedError) rather than dropped unawaited, and what
process_records returns is read as a batch result (`first_failed`). No dependency: the
test harness runs without the worker extra."""

from __future__ import annotations

from collections.abc import Sequence

from streamconsumer.processor import (
    Checkpointer,
    Record,
    RecordProcessor,
    ShardInfo,
    first_failed,
    refuse_awaitable,
)

# (mypy: the methods are typed to return None; what they return is what is checked.)


def initialize(processor: RecordProcessor, shard: ShardInfo) -> None:
    refuse_awaitable(processor.initialize(shard), "initialize")  # type: ignore[func-returns-value]


def process_records(
    processor: RecordProcessor, records: Sequence[Record], checkpointer: Checkpointer
) -> int:
    """The index of the first record the call reports failed; len(records) when none. The
    processor gets a copy of `records`: what it does to its list is its own."""
    return first_failed(records, processor.process_records(list(records), checkpointer))


def shard_ended(processor: RecordProcessor, checkpointer: Checkpointer) -> None:
    refuse_awaitable(processor.shard_ended(checkpointer), "shard_ended")  # type: ignore[func-returns-value]


def shutdown_requested(processor: RecordProcessor, checkpointer: Checkpointer) -> None:
    refuse_awaitable(processor.shutdown_requested(checkpointer), "shutdown_requested")  # type: ignore[func-returns-value]


def lease_lost(processor: RecordProcessor) -> None:
    refuse_awaitable(processor.lease_lost(), "lease_lost")  # type: ignore[func-returns-value]
