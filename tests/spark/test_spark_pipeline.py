"""SparkBatchProcessor on a real local Spark, fed from the real emulator: output reaches the
Parquet and Delta sinks exactly once per (shard, sequence) even when the worker dies between the
sink's commit and the checkpoint, and a checkpoint never passes an uncommitted batch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamconsumer.sources.kinesis import KinesisSource, StreamRef
from streamconsumer.spark import BatchInfo, DeltaSink, ParquetSink, SparkBatchProcessor
from testbed.kinesis import KinesisEmulator, put_records
from testbed.shard_life import consume

pytestmark = pytest.mark.spark


def decode(df: DataFrame, batch: BatchInfo) -> DataFrame:
    return df.withColumn("text", F.col("data").cast("string")).drop("data")


class Crash(Exception):
    """The worker dies: after the sink committed, before the checkpoint."""


@dataclass
class CrashAfterCommit:
    sink: ParquetSink | DeltaSink
    after_writes: int
    writes: int = 0

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.sink.write(df, batch)
        self.writes += 1
        if self.writes == self.after_writes:
            raise Crash(batch.first_sequence)


def sink_for(kind: str, path: Path) -> ParquetSink | DeltaSink:
    return ParquetSink(str(path)) if kind == "parquet" else DeltaSink(str(path))


def read_output(spark: SparkSession, kind: str, path: Path) -> list[tuple[str, str, str]]:
    table = spark.read.format(kind).load(str(path))
    rows = table.select("shard_id", "sequence_number", "text").collect()
    return [(row.shard_id, row.sequence_number, row.text) for row in rows]


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_replayed_batch_overwrites_itself(
    spark: SparkSession, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path, kind: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=2)
    put_records(client, stream_name, [(f"k{i}", b"event-%d" % i) for i in range(600)])
    source = KinesisSource(client, StreamRef(name=stream_name), max_records=50)
    sink = sink_for(kind, tmp_path / "out")

    for shard in (s.id for s in source.list_shards()):
        checkpoints: list[str] = []
        crashing = SparkBatchProcessor(
            decode,
            CrashAfterCommit(sink, after_writes=2),
            stream_name,
            max_records=100,
            max_wait=3600,
            session=lambda: spark,
        )
        with pytest.raises(Crash):
            consume(source, shard, crashing, checkpoints)
        assert len(checkpoints) == 1, "the second batch was committed but never checkpointed"
        # The replay cuts its batches elsewhere (50 records): it still replaces the first write.
        restarted = SparkBatchProcessor(
            decode, sink, stream_name, max_records=50, max_wait=3600, session=lambda: spark
        )
        consume(source, shard, restarted, checkpoints)

    rows = read_output(spark, kind, tmp_path / "out")
    keys = [(shard, sequence) for shard, sequence, _ in rows]
    assert len(keys) == len(set(keys)), "each (shard, sequence) exactly once"
    assert sorted(text for *_, text in rows) == sorted(f"event-{i}" for i in range(600))


def test_a_checkpoint_never_passes_an_uncommitted_batch(
    spark: SparkSession, kinesis: KinesisEmulator, stream_name: str
) -> None:
    class Down:
        def write(self, df: DataFrame, batch: BatchInfo) -> None:
            df.count()  # the pipeline ran...
            raise OSError("sink unavailable")  # ...but nothing was committed

    client = kinesis.new_stream(stream_name, shards=1)
    put_records(client, stream_name, [("k", b"x")] * 150)
    source = KinesisSource(client, StreamRef(name=stream_name))
    processor = SparkBatchProcessor(
        decode, Down(), stream_name, max_records=100, max_wait=3600, session=lambda: spark
    )
    checkpoints: list[str] = []
    with pytest.raises(OSError, match="sink unavailable"):
        consume(source, source.list_shards()[0].id, processor, checkpoints)
    assert checkpoints == []
