"""Test your record processor the way the worker runs it, with no stream and no operator:

    records = make_records(b"a", b"b")  # sequence numbers "1", "2"
    harness = ProcessorHarness(PageCounter())
    harness.initialize()
    harness.process(records)          # raises what process_records raised
    assert harness.checkpoints == ["2"]
    harness.lose_lease()              # lease_lost(), as when another worker took the shard

Each call is wrapped as in the worker: a checkpoint your code asks for is stored once the
call returns (`checkpoints` lists them in order); a call that raises stores nothing. A
partial batch response is read as the worker reads it: `process` returns the records the
worker would deliver again (from the first failed one on), and raises BatchResultError
for a result the worker would count as the whole batch failing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from streamconsumer.processor import (
    SHARD_END,
    Checkpointer,
    FunctionProcessor,
    ProcessResult,
    Progress,
    Record,
    RecordProcessor,
    ShardInfo,
    first_failed,
)


def make_records(
    *payloads: bytes | str,
    partition_key: str = "key",
    first_sequence: int = 1,
    arrived: datetime | None = None,
) -> list[Record]:
    """Records as a worker hands them over, one per payload (a str is UTF-8 encoded), with
    sequence numbers counting from `first_sequence`: a checkpoint at any of them stores
    its sequence number, as on a real shard."""
    when = arrived or datetime.now(UTC)
    records = []
    for number, payload in enumerate(payloads, start=first_sequence):
        data = payload.encode() if isinstance(payload, str) else payload
        sequence = str(number)
        records.append(Record(data, partition_key, sequence, when, checkpoint_sequence=sequence))
    return records


class ProcessorHarness:
    """`processor`: a processor instance, or a plain function run as the worker runs one
    (checkpointed when it returns)."""

    def __init__(
        self,
        processor: RecordProcessor | Callable[[list[Record]], ProcessResult],
        shard_id: str = "shardId-000000000000",
        start_sequence: str | None = None,
        parents: tuple[str, ...] = (),
    ) -> None:
        if not isinstance(processor, RecordProcessor):
            processor = FunctionProcessor(processor)
        self.processor: RecordProcessor = processor
        self.shard = ShardInfo(shard_id, start_sequence, parents)
        self.progress = Progress(shard_id, start_sequence)
        self.checkpointer = Checkpointer(self.progress)
        self.checkpoints: list[str] = []

    def initialize(self) -> None:
        self._call(lambda: self.processor.initialize(self.shard))

    def process(self, records: Sequence[Record]) -> list[Record]:
        """The records to deliver again: none when the call reports no failure."""
        self.progress.begin(records)
        try:
            done = first_failed(
                records, self.processor.process_records(list(records), self.checkpointer)
            )
            if done < len(records):
                self.progress.partly_returned(records[done - 1] if done else None)
        except BaseException:
            self.progress.raised()
            raise
        if done == len(records):
            self.progress.returned()
        self._store()
        return list(records[done:])

    def end_shard(self) -> None:
        """shard_ended(), then SHARD_END stored, as the worker does at a shard's end."""
        self.progress.shard_ended()
        self._call(lambda: self.processor.shard_ended(self.checkpointer))
        if self.progress.requested != SHARD_END:
            self.checkpointer.checkpoint()
            self._store()

    def shutdown(self) -> None:
        self._call(lambda: self.processor.shutdown_requested(self.checkpointer))

    def lose_lease(self) -> None:
        """lease_lost(), as when the operator gave the shard to another worker: the
        processor may no longer checkpoint (what it asks is dropped, as by the worker)."""
        self.processor.lease_lost()

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
