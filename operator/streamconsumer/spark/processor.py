"""SparkBatchProcessor: a record processor that hands batches to a PySpark pipeline.

Per shard it gathers records up to `max_records` or `max_wait` seconds, builds an Arrow
table, makes a DataFrame, calls your `transform(df, batch)`, writes the result through a
sink, and only then checkpoints the batch's last record. Heartbeats run on the worker's
own thread, so a slow Spark job never costs the lease (keep a batch well within it)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo
from streamconsumer.spark.schema import to_arrow
from streamconsumer.spark.sinks import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class BatchInfo:
    stream: str
    shard_id: str
    first_sequence: str
    last_sequence: str
    records: int


Transform = Callable[["DataFrame", BatchInfo], "DataFrame"]


def spark_session() -> SparkSession:
    """Spark Connect when SPARK_REMOTE is set (no JVM in the worker), otherwise an
    in-process local[N] session with the settings that fit a small pod."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("streamconsumer")
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        return builder.remote(remote).getOrCreate()
    return (
        builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "1g"))
        .getOrCreate()
    )


class SparkBatchProcessor(BaseRecordProcessor):
    # Called on empty reads too, so a partial batch is flushed after max_wait on a quiet shard.
    wants_empty_batches = True

    def __init__(
        self,
        transform: Transform,
        sink: Sink,
        stream: str,
        max_records: int = 100_000,
        max_wait: float = 5.0,
        session: Callable[[], SparkSession] = spark_session,
    ) -> None:
        self.transform = transform
        self.sink = sink
        self.stream = stream
        self.max_records = max_records
        self.max_wait = max_wait
        self._session = session
        self._buffer: list[Record] = []
        self._since: float | None = None

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.spark = self._session()  # warm before the first batch, not during it

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if records and not self._buffer:
            self._since = time.monotonic()
        self._buffer.extend(records)
        full = len(self._buffer) >= self.max_records
        waited = self._since is not None and time.monotonic() - self._since >= self.max_wait
        if self._buffer and (full or waited):
            self.flush(checkpointer)

    def flush(self, checkpointer: Checkpointer) -> None:
        """Writes the gathered records through the pipeline, then checkpoints them."""
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
        frame = self.spark.createDataFrame(to_arrow(self.stream, self.shard.shard_id, batch))
        self.sink.write(self.transform(frame, info), info)  # committed...
        checkpointer.checkpoint(batch[-1])  # ...then, and only then, the checkpoint
        self._buffer, self._since = [], None

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.flush(checkpointer)
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.flush(checkpointer)
