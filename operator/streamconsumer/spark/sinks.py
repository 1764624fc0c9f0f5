"""Where a batch's output goes. After a crash between a sink's commit and the checkpoint,
the worker replays the batch from the same first record, so a sink must make that replay
replace the first write instead of adding to it:

- ParquetSink: effectively-once. Each batch goes to a deterministic directory,
  `shard=<id>/batch=<first sequence>`, written with overwrite: a replay replaces itself.
- DeltaSink: effectively-once. Rows carry `shard_id` and `batch` (the first sequence);
  each write is an overwrite with `replaceWhere` on that pair, one atomic Delta commit.
- DeltaMergeSink: effectively-once for change data (CDC). Each row is a change of the
  row with its `key`, ordered by `order`; MERGE keeps per key the change with the highest
  order, so a replayed or older change is a no-op. Deletes stay as tombstones (a row
  with `deleted` true) so that a replayed older change cannot bring a deleted row back.
- ForeachBatchSink: at-least-once, unless your function is idempotent per BatchInfo.

A replay may cut the batch at a different record (its size depends on timing); it still
starts at the same record and replaces the first write, and the rest arrives in the next
batch, so each record lands once either way."""

from __future__ import annotations

import re
import uuid
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


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class DeltaMergeSink:
    """Upserts changes into a Delta table: one row per `key`, the change with the highest
    `order` wins (within a batch and against the table), whatever order or how often the
    changes arrive. A delete is a change like any other whose row says `deleted` (a
    tombstone): readers filter `NOT deleted`; a later change of the key revives the row.
    `order` must sort as the changes happened (e.g. a zero-padded sequence number).

    Writers of different shards MERGE into the same table: Delta's optimistic concurrency
    may refuse one of two concurrent commits; the processor then raises, and the worker
    delivers the same batch again, which the MERGE makes harmless."""

    path: str
    key: str = "key"
    order: str = "sequence"
    spark_conf: Mapping[str, str] = field(default_factory=delta_conf)
    _created: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in (self.key, self.order):
            if not _IDENTIFIER.match(name):
                raise ValueError(f"column {name!r} is not a plain identifier")
        if "`" in self.path:
            raise ValueError(f"path {self.path!r} may not contain a backtick")

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        newest_first = Window.partitionBy(self.key).orderBy(F.col(self.order).desc())
        newest = (
            df.withColumn("_rank", F.row_number().over(newest_first))
            .where(F.col("_rank") == 1)
            .drop("_rank")
        )
        spark = df.sparkSession
        if not self._created:  # creates the table with the batch's schema (a no-op after)
            newest.limit(0).write.format("delta").mode("append").save(self.path)
            self._created = True
        view = f"streamconsumer_changes_{uuid.uuid4().hex}"
        newest.createOrReplaceTempView(view)
        try:
            spark.sql(
                f"MERGE INTO delta.`{self.path}` AS t USING {view} AS s "
                f"ON t.{self.key} = s.{self.key} "
                f"WHEN MATCHED AND s.{self.order} > t.{self.order} THEN UPDATE SET * "
                "WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            spark.catalog.dropTempView(view)


@dataclass(frozen=True)
class ForeachBatchSink:
    function: Callable[[DataFrame, BatchInfo], None]
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.function(df, batch)
