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
- DeltaChangesSink: the same changes, from many shards into one table: appended to a
  change log (appends never conflict), MERGEd into the mirror by one apply job.
- ForeachBatchSink: at-least-once, unless your function is idempotent per BatchInfo.

A replay may cut the batch at a different record (its size depends on timing); it still
starts at the same record and replaces the first write, and the rest arrives in the next
batch, so each record lands once either way. Delta commits that lose a race to another
writer's run again inside the sink (delta_tables.py): never a processor failure."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from streamconsumer.spark.delta_tables import CHANGE_LOG_TABLE, HEALTHY_TABLE, until_committed
from streamconsumer.spark.session import SparkConf, delta_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamconsumer.spark.batching import BatchInfo


class Sink(Protocol):
    """A sink may also have `spark_conf`: settings it needs in the SparkSession (jars,
    extensions), or a function giving them, applied when the worker starts a JVM of its
    own (never sent to a Spark Connect server, which is configured on its side)."""

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        """Commits the batch's output; returns only once it is durable."""
        ...


@dataclass(frozen=True)
class ParquetSink:
    path: str
    spark_conf: SparkConf = field(default_factory=dict)

    def batch_path(self, batch: BatchInfo) -> str:
        return f"{self.path.rstrip('/')}/shard={batch.shard_id}/batch={batch.first_sequence}"

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        df.write.mode("overwrite").parquet(self.batch_path(batch))


BATCH_COLUMNS = ("shard_id", "batch")


def keyed(df: DataFrame, batch: BatchInfo) -> DataFrame:
    """The batch's rows with BATCH_COLUMNS: its shard and its first sequence number."""
    from pyspark.sql import functions as F

    shard, first = BATCH_COLUMNS
    return df.withColumn(shard, F.lit(batch.shard_id)).withColumn(
        first, F.lit(batch.first_sequence)
    )


@dataclass
class DeltaSink:
    """A Delta table partitioned by shard. Workers writing different shards never conflict:
    each replaces rows of its own partition only (a race to create the table is retried)."""

    path: str
    spark_conf: SparkConf = delta_conf
    lost_races: int = field(default=0, init=False)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        # Shard ids and sequence numbers are [A-Za-z0-9_-] and digits: safe to inline.
        replace = f"shard_id = '{batch.shard_id}' AND batch = '{batch.first_sequence}'"
        writer = (
            keyed(df, batch)
            .coalesce(1)  # a batch is one file
            .write.format("delta")
            .options(**HEALTHY_TABLE)
            .mode("overwrite")
            .option("replaceWhere", replace)
            .partitionBy("shard_id")
        )
        self.lost_races += until_committed(lambda: writer.save(self.path), self.path)[1]


@dataclass
class DeltaChangesSink:
    """Change data from many shards bound for one table, landed as a change log: each
    batch is one blind append to `path` (partitioned by shard, with `shard_id` and
    `batch` columns), which never conflicts with another writer's; the apply job
    (`python -m streamconsumer.spark.apply_changes`) MERGEs the log into the mirror, alone.
    A batch replayed after a crash lands twice: harmless, the MERGE keeps per key the
    change with the highest order and a repeat of it is a no-op."""

    path: str
    spark_conf: SparkConf = delta_conf
    lost_races: int = field(default=0, init=False)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        writer = (
            keyed(df, batch)
            .coalesce(1)
            .write.format("delta")
            .options(**CHANGE_LOG_TABLE)
            .mode("append")
            .partitionBy("shard_id")
        )
        self.lost_races += until_committed(lambda: writer.save(self.path), self.path)[1]


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Merge:
    """MERGE of changes into a Delta table: one row per `key`, the change with the highest
    `order` wins (within the changes, then against the table), whatever order or how often
    the changes arrive. A delete is a change like any other whose row says `deleted` (a
    tombstone): readers filter `NOT deleted`; a later change of the key revives the row.
    `order` must sort as the changes happened (e.g. a zero-padded sequence number)."""

    path: str
    key: str = "key"
    order: str = "sequence"

    def __post_init__(self) -> None:
        for name in (self.key, self.order):
            if not _IDENTIFIER.match(name):
                raise ValueError(f"column {name!r} is not a plain identifier")
        if "`" in self.path:
            raise ValueError(f"path {self.path!r} may not contain a backtick")

    def newest(self, changes: DataFrame) -> DataFrame:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        newest_first = Window.partitionBy(self.key).orderBy(F.col(self.order).desc())
        return (
            changes.withColumn("_rank", F.row_number().over(newest_first))
            .where(F.col("_rank") == 1)
            .drop("_rank")
        )

    def create(self, changes: DataFrame) -> None:
        """The table, with the changes' schema, if it does not exist (appending no rows)."""
        empty = changes.limit(0).write.format("delta").options(**HEALTHY_TABLE).mode("append")
        until_committed(lambda: empty.save(self.path), f"creating {self.path}")

    def apply(self, changes: DataFrame) -> int:
        """MERGEs `changes`; returns how many of its commits lost a race (and ran again)."""
        spark = changes.sparkSession
        view = f"streamconsumer_changes_{uuid.uuid4().hex}"
        self.newest(changes).createOrReplaceTempView(view)
        statement = (
            f"MERGE INTO delta.`{self.path}` AS t USING {view} AS s "
            f"ON t.{self.key} = s.{self.key} "
            f"WHEN MATCHED AND s.{self.order} > t.{self.order} THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        try:
            return until_committed(lambda: spark.sql(statement), f"MERGE into {self.path}")[1]
        finally:
            spark.catalog.dropTempView(view)


@dataclass
class DeltaMergeSink:
    """Upserts each batch's changes into a Delta table (see Merge): effectively once for
    change data, whatever the batch boundaries of a replay.

    For one or a few writers. Each MERGE rewrites the files holding the keys it changes,
    so writers of different shards racing into one table lose commit races (Delta checks
    conflicts per file): each lost race runs the MERGE again inside the sink, never
    reaching the failure policy, but the writers then mostly wait on each other. For
    many shards into one table, land a change log (DeltaChangesSink) and let the apply
    job MERGE it alone."""

    path: str
    key: str = "key"
    order: str = "sequence"
    spark_conf: SparkConf = delta_conf
    lost_races: int = field(default=0, init=False)
    _created: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._merge = Merge(self.path, self.key, self.order)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        if not self._created:
            self._merge.create(df)
            self._created = True
        self.lost_races += self._merge.apply(df)


@dataclass(frozen=True)
class ForeachBatchSink:
    function: Callable[[DataFrame, BatchInfo], None]
    spark_conf: SparkConf = field(default_factory=dict)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.function(df, batch)
