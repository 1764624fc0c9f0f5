"""Spark pipeline throughput: 100k records of one kinesalite shard read by the real
reader and processed (a) by a no-op processor that checkpoints — the baseline — (b) by
SparkBatchProcessor in 100k-record batches (Arrow path, a transform, Parquet sink), (c)
the same into a Delta table, and (d) by the JVM-free bronze landing processor (Parquet
files), all timed end to end in the same run; plus each sink's cost per batch."""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.results import record
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.kinesis import KinesisSource, StreamRef
from streamconsumer.spark import (
    BatchInfo,
    BronzeProcessor,
    DeltaSink,
    ParquetSink,
    SparkBatchProcessor,
)
from streamconsumer.spark.session import delta_conf, spark_session
from streamconsumer.testing import ProcessorHarness
from testbed.kinesis import KinesisEmulator, create_stream, put_records

RECORDS = 100_000


class NoOp(BaseRecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()


@dataclass
class TimedSink:
    sink: ParquetSink | DeltaSink
    seconds: list[float] = field(default_factory=list)

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        started = time.perf_counter()
        self.sink.write(df, batch)
        self.seconds.append(time.perf_counter() - started)

    def mean(self) -> float:
        return sum(self.seconds) / len(self.seconds)


def spark_processor(sink: TimedSink, spark: SparkSession) -> SparkBatchProcessor:
    return SparkBatchProcessor(transform, sink, "spark", RECORDS, 3600, lambda: spark)


def transform(df: DataFrame, batch: BatchInfo) -> DataFrame:
    return df.withColumn("text", F.col("data").cast("string")).drop("data")


def run(source: KinesisSource, shard: str, processor: BaseRecordProcessor) -> float:
    """Seconds to read the shard from TRIM_HORIZON to its tip through `processor`."""
    harness = ProcessorHarness(processor, shard)
    harness.initialize()
    reader = source.open_reader(shard, StartPosition(type=StartPositionType.TRIM_HORIZON))
    started = time.perf_counter()
    seen = 0
    while True:
        result = reader.read()
        harness.process(result.records)
        seen += len(result.records)
        if not result.records:
            break
    harness.shutdown()
    elapsed = time.perf_counter() - started
    assert seen == RECORDS, seen
    assert harness.checkpoints, "the batch was checkpointed"
    return elapsed


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="streamconsumer-bench-spark-"))
    emulator = KinesisEmulator.start("kinesalite", work / "kinesalite", operation_delay_ms=50)
    spark = spark_session(delta_conf())
    try:
        create_stream(emulator.client, "spark", 1)
        keys = [f"k{i}" for i in range(RECORDS)]
        with ThreadPoolExecutor(4) as pool:
            chunks = [keys[i : i + 2000] for i in range(0, RECORDS, 2000)]
            list(
                pool.map(
                    lambda c: put_records(
                        emulator.client, "spark", [(k, b'{"page":"/"}') for k in c]
                    ),
                    chunks,
                )
            )
        source = KinesisSource(emulator.client, StreamRef(name="spark"), max_records=10_000)
        shard = source.list_shards()[0].id
        baseline = run(source, shard, NoOp())
        # The worker warms up before it takes leases; so does the benchmark.
        SparkBatchProcessor(transform, ParquetSink(str(work / "warm")), "spark").warm_up()
        parquet = TimedSink(ParquetSink(str(work / "parquet")))
        spark_seconds = run(source, shard, spark_processor(parquet, spark))
        delta = TimedSink(DeltaSink(str(work / "delta")))
        delta_seconds = run(source, shard, spark_processor(delta, spark))
        bronze_seconds = run(source, shard, BronzeProcessor(str(work / "bronze"), "spark", RECORDS))
        print(f"{RECORDS} records from one kinesalite shard, one 100k-record batch:")
        print(f"  no-op processor          {RECORDS / baseline:9.0f} records/s  (baseline)")
        for name, seconds in (
            ("Spark -> Parquet", spark_seconds),
            ("Spark -> Delta", delta_seconds),
            ("bronze landing (no JVM)", bronze_seconds),
        ):
            print(f"  {name:24} {RECORDS / seconds:9.0f} records/s  ({baseline / seconds:.2f}x)")
        print(f"  Parquet sink per batch   {parquet.mean():9.2f} s")
        print(f"  Delta sink per batch     {delta.mean():9.2f} s")
        record(
            {
                "spark_records_per_second": round(RECORDS / spark_seconds),
                "spark_vs_noop_ratio": round(baseline / spark_seconds, 3),
                "spark_sink_seconds_per_batch": round(parquet.mean(), 3),
                "spark_delta_vs_noop_ratio": round(baseline / delta_seconds, 3),
                "spark_delta_sink_seconds_per_batch": round(delta.mean(), 3),
                "bronze_records_per_second": round(RECORDS / bronze_seconds),
                "bronze_vs_noop_ratio": round(baseline / bronze_seconds, 3),
            }
        )
    finally:
        spark.stop()
        emulator.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
