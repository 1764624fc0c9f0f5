"""Where a batch's output goes. After a crash between a sink's commit and the checkpoint,
the worker replays the batch from the same first record, so a sink must make that replay
replace the first write instead of adding to it:

- ParquetSink: effectively-once. Each batch goes to a deterministic directory,
  `shard=<id>/batch=<first sequence>`, written with overwrite: a replay replaces itself.
- DeltaSink: effectively-once. Rows carry `shard_id` and `batch` (the first sequence);
  each write is an overwrite with `replaceWhere` on that pair, one atomic Delta commit.
- ForeachBatchSink: at-least-once, unless your function is idempotent per BatchInfo.

A replay may cut the batch at a different record (its size depends on timing); it still
starts at the same record and replaces the first write, and the rest arrives in the next
batch, so each record lands once either way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from streamconsumer.spark.session import delta_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamconsumer.spark.batching import BatchInfo


class Sink(Protocol):
    """A sink may also have `spark_conf`: settings it needs in the SparkSession (jars,
    extensions), applied when the worker creates the session."""

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        """Commits the batch's output; returns only once it is durable."""
        ...


@dataclass(frozen=True)
class ParquetSink:
    path: str
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def batch_path(self, batch: BatchInfo) -> str:
        return f"{self.path.rstrip('/')}/shard={batch.shard_id}/batch={batch.first_sequence}"

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        df.write.mode("overwrite").parquet(self.batch_path(batch))


@dataclass(frozen=True)
class DeltaSink:
    """A Delta table partitioned by shard. Workers writing different shards never conflict:
    each replaces rows of its own partition only."""

    path: str
    spark_conf: Mapping[str, str] = field(default_factory=delta_conf)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        from pyspark.sql import functions as F

        keyed = df.withColumn("shard_id", F.lit(batch.shard_id)).withColumn(
            "batch", F.lit(batch.first_sequence)
        )
        # Shard ids and sequence numbers are [A-Za-z0-9_-] and digits: safe to inline.
        replace = f"shard_id = '{batch.shard_id}' AND batch = '{batch.first_sequence}'"
        (
            keyed.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", replace)
            .partitionBy("shard_id")
            .save(self.path)
        )


@dataclass(frozen=True)
class ForeachBatchSink:
    function: Callable[[DataFrame, BatchInfo], None]
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.function(df, batch)
