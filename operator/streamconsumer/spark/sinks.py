"""Where a batch's output goes. A sink's write must be idempotent for a replayed batch:
after a crash between the sink's commit and the checkpoint, the same batch (same first
record) is written again.

- ParquetSink: effectively-once. Each batch goes to a deterministic directory,
  `shard=<id>/batch=<first sequence>`, written with overwrite: a replay replaces itself.
- ForeachBatchSink: at-least-once unless your function is idempotent per BatchInfo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamconsumer.spark.processor import BatchInfo


class Sink(Protocol):
    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        """Commits the batch's output; returns only once it is durable."""
        ...


@dataclass(frozen=True)
class ParquetSink:
    path: str

    def batch_path(self, batch: BatchInfo) -> str:
        return f"{self.path.rstrip('/')}/shard={batch.shard_id}/batch={batch.first_sequence}"

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        df.write.mode("overwrite").parquet(self.batch_path(batch))


@dataclass(frozen=True)
class ForeachBatchSink:
    function: Callable[[DataFrame, BatchInfo], None]

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.function(df, batch)
