"""Test your record processor the way the worker runs it, with no stream and no operator:

    harness = ProcessorHarness(PageCounter())
    harness.initialize()
    harness.process(records)          # raises what process_records raised
    assert harness.checkpoints == ["42"]

Each call is wrapped as in the worker: a checkpoint your code asks for is stored once the
call returns (`checkpoints` lists them in order); a call that raises stores nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from streamconsumer.processor import (
    SHARD_END,
    Checkpointer,
    Progress,
    Record,
    RecordProcessor,
    ShardInfo,
)


class ProcessorHarness:
    def __init__(
        self,
        processor: RecordProcessor,
        shard_id: str = "shardId-000000000000",
        start_sequence: str | None = None,
        parents: tuple[str, ...] = (),
    ) -> None:
        self.processor = processor
        self.shard = ShardInfo(shard_id, start_sequence, parents)
        self.progress = Progress(shard_id, start_sequence)
        self.checkpointer = Checkpointer(self.progress)
        self.checkpoints: list[str] = []

    def initialize(self) -> None:
        self._call(lambda: self.processor.initialize(self.shard))

    def process(self, records: Sequence[Record]) -> None:
        self._call(
            lambda: self.processor.process_records(list(records), self.checkpointer), records
        )

    def end_shard(self) -> None:
        """shard_ended(), then SHARD_END stored, as the worker does at a shard's end."""
        self.progress.shard_ended()
        self._call(lambda: self.processor.shard_ended(self.checkpointer))
        if self.progress.requested != SHARD_END:
            self.checkpointer.checkpoint()
            self._store()

    def shutdown(self) -> None:
        self._call(lambda: self.processor.shutdown_requested(self.checkpointer))

    def _call(self, call: Callable[[], None], records: Sequence[Record] = ()) -> None:
        self.progress.begin(records)
        try:
            call()
        except BaseException:
            self.progress.raised()
            raise
        self.progress.returned()
        self._store()

    def _store(self) -> None:
        pending = self.progress.pending()
        if pending is not None:
            self.checkpoints.append(pending)
            self.progress.accepted(pending)
