"""SparkBatchProcessor on a real local Spark, fed from the real emulator: output reaches the
Parquet sink exactly once per (shard, sequence) even when the worker dies between the
sink's commit and the checkpoint, and a checkpoint never passes an uncommitted batch."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Checkpointer, ShardInfo
from streamconsumer.sources.kinesis import KinesisSource, StreamRef
from streamconsumer.spark import BatchInfo, ParquetSink, SparkBatchProcessor
from streamconsumer.spark.processor import spark_session
from testbed.kinesis import KinesisEmulator, create_stream, put_records

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", params=["local", "connect"])
def spark(
    request: pytest.FixtureRequest, monkeypatch_module: pytest.MonkeyPatch
) -> Iterator[SparkSession]:
    """Spark in the worker, then Spark Connect (a local Connect server: what SPARK_REMOTE
    points a worker at); every test runs on both."""
    if request.param == "connect":
        monkeypatch_module.setenv("SPARK_REMOTE", "local[2]")
    session = spark_session()
    assert ("connect" in type(session).__module__) == (request.param == "connect")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def decode(df: DataFrame, batch: BatchInfo) -> DataFrame:
    return df.withColumn("text", F.col("data").cast("string")).drop("data")


class Crash(Exception):
    """The worker dies: after the sink committed, before the checkpoint."""


@dataclass
class CrashAfterCommit:
    sink: ParquetSink
    after_writes: int
    writes: int = 0

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.sink.write(df, batch)
        self.writes += 1
        if self.writes == self.after_writes:
            raise Crash(batch.first_sequence)


def consume(
    source: KinesisSource,
    shard: str,
    processor: SparkBatchProcessor,
    checkpoints: list[str],
) -> None:
    """One worker's life on a shard: resume after the last checkpoint, read to the tip."""
    start = (
        StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=checkpoints[-1])
        if checkpoints
        else StartPosition(type=StartPositionType.TRIM_HORIZON)
    )
    checkpointer = Checkpointer(shard, checkpoints.append, checkpoints[-1] if checkpoints else None)
    processor.initialize(ShardInfo(shard, start.sequence_number))
    reader = source.open_reader(shard, start)
    while True:
        result = reader.read()
        checkpointer._delivering(result.records)
        processor.process_records(result.records, checkpointer)
        if not result.records:
            break
    processor.shutdown_requested(checkpointer)


def test_replayed_batch_overwrites_itself(
    spark: SparkSession, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    client = kinesis.client
    create_stream(client, stream_name, shards=2)
    put_records(client, stream_name, [(f"k{i}", b"event-%d" % i) for i in range(600)])
    source = KinesisSource(client, StreamRef(name=stream_name), max_records=50)
    sink = ParquetSink(str(tmp_path / "out"))

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
        restarted = SparkBatchProcessor(
            decode, sink, stream_name, max_records=100, max_wait=3600, session=lambda: spark
        )
        consume(source, shard, restarted, checkpoints)

    table = ds.dataset(str(tmp_path / "out"), format="parquet", partitioning="hive").to_table()
    rows = list(
        zip(table["shard_id"].to_pylist(), table["sequence_number"].to_pylist(), strict=True)
    )
    assert len(rows) == len(set(rows)), "each (shard, sequence) exactly once"
    assert sorted(table["text"].to_pylist()) == sorted(f"event-{i}" for i in range(600))


def test_a_checkpoint_never_passes_an_uncommitted_batch(
    spark: SparkSession, kinesis: KinesisEmulator, stream_name: str
) -> None:
    class Down:
        def write(self, df: DataFrame, batch: BatchInfo) -> None:
            df.count()  # the pipeline ran...
            raise OSError("sink unavailable")  # ...but nothing was committed

    client = kinesis.client
    create_stream(client, stream_name, shards=1)
    put_records(client, stream_name, [("k", b"x")] * 150)
    source = KinesisSource(client, StreamRef(name=stream_name))
    processor = SparkBatchProcessor(
        decode, Down(), stream_name, max_records=100, max_wait=3600, session=lambda: spark
    )
    checkpoints: list[str] = []
    with pytest.raises(OSError, match="sink unavailable"):
        consume(source, source.list_shards()[0].id, processor, checkpoints)
    assert checkpoints == []
