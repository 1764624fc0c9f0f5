"""Batching shared by the Spark processor and the bronze landing processor: per shard,
gather records up to `max_records` or `max_wait` seconds, commit the batch somewhere
durable, and only then checkpoint its last record. A batch is always whole reads, so a
de-aggregated KPL record is never split across two batches.

When a commit fails, `process_records` raises and leaves no trace: the records it added
are taken out of the buffer again, since the worker counts them as not processed and
delivers them again (gathering them twice would write them twice; keeping them would
let a later flush commit records the worker cannot checkpoint)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo
from streamconsumer.worker.config import WorkerConfig


@dataclass(frozen=True)
class BatchInfo:
    stream: str
    shard_id: str
    first_sequence: str
    last_sequence: str
    records: int


def stream_from_environment() -> str:
    """The stream's name as the worker's pod template gives it: a Kinesis stream's name,
    a DynamoDB table's name, or taken from the ARN (arn:...:stream/NAME for Kinesis,
    arn:...:table/NAME/stream/LABEL for a table's stream)."""
    name_variable = WorkerConfig.env_name("stream_name")
    table_variable = WorkerConfig.env_name("table_name")
    arn_variable = WorkerConfig.env_name("stream_arn")
    name = os.environ.get(name_variable) or os.environ.get(table_variable)
    arn = os.environ.get(arn_variable)
    if name:
        return name
    if arn:
        resource = arn.split(":", 5)[-1]
        if resource.startswith("table/"):
            return resource.split("/")[1]
        return arn.rsplit("/", 1)[-1]
    raise ValueError(
        f"stream not given and none of {name_variable}, {table_variable}, {arn_variable} is set"
    )


class BatchingProcessor(BaseRecordProcessor):
    # Called on empty reads too, so a partial batch is flushed after max_wait on a quiet shard.
    wants_empty_batches = True

    def __init__(
        self,
        stream: str | None = None,
        max_records: int = 100_000,
        max_wait: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_records < 1 or max_wait <= 0:
            raise ValueError("max_records must be >= 1 and max_wait > 0")
        self.stream = stream or stream_from_environment()
        self.max_records = max_records
        self.max_wait = max_wait
        self._clock = clock
        self._buffer: list[Record] = []
        self._since: float | None = None

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        """Makes the batch durable; returns only once it is. Must be idempotent for a batch
        replayed after a crash between this commit and the checkpoint."""
        raise NotImplementedError

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self._buffer, self._since = [], None

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        kept, since = len(self._buffer), self._since
        if records and not self._buffer:
            self._since = self._clock()
        self._buffer.extend(records)
        full = len(self._buffer) >= self.max_records
        waited = self._since is not None and self._clock() - self._since >= self.max_wait
        if self._buffer and (full or waited):
            try:
                self.flush(checkpointer)
            except BaseException:
                self._unbuffer(kept, since)
                raise

    def _unbuffer(self, kept: int, since: float | None) -> None:
        """A call that raised leaves the buffer as it was: the worker retries the same
        records, which must not be gathered twice."""
        del self._buffer[kept:]
        self._since = since

    def flush(self, checkpointer: Checkpointer) -> None:
        """Commits the gathered records, then checkpoints them."""
        if not self._buffer:
            return
        batch = self._buffer
        info = BatchInfo(
            stream=self.stream,
            shard_id=self.shard.shard_id,
            first_sequence=batch[0].sequence_number,
            last_sequence=batch[-1].sequence_number,
            records=len(batch),
        )
        self.commit(batch, info)  # committed...
        checkpointer.checkpoint(batch[-1])  # ...then, and only then, the checkpoint
        self._buffer, self._since = [], None

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.flush(checkpointer)
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.flush(checkpointer)
