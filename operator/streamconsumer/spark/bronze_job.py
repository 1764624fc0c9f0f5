"""The Structured Streaming job that processes a bronze landing path exactly once.

Spark's file source remembers in its checkpoint which files each micro-batch read, and
re-runs a failed micro-batch with the same id and the same files; the output of batch N
goes to `<output>/batch_id=N`, written with overwrite, so a re-run replaces itself. The
landing side never writes a record into two files (see bronze.py), so each record is
counted once.

    python -m streamconsumer.spark.bronze_job --bronze /data/bronze \\
        --output /data/page-views --checkpoint /data/checkpoints/page-views \\
        --transform clickstream.pipeline:page_views_per_minute --once
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamconsumer.spark.session import ship_by_value, spark_session
from streamconsumer.spark.streaming_job import (
    add_trigger_arguments,
    basic_logging,
    run_to_end,
    triggered,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

# Spark's view of the Arrow schema in schema.py.
BRONZE_SCHEMA = (
    "stream STRING, shard_id STRING, sequence_number STRING, sub_sequence_number BIGINT, "
    "partition_key STRING, approximate_arrival_timestamp TIMESTAMP, data BINARY"
)

BatchTransform = Callable[["DataFrame"], "DataFrame"]


def read_bronze(spark: SparkSession, bronze: str, max_files_per_trigger: int = 1000) -> DataFrame:
    return (
        spark.readStream.schema(BRONZE_SCHEMA)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .parquet(f"{bronze.rstrip('/')}/*/*.parquet")
    )


INTERVAL = "30 seconds"  # between micro-batches, unless --once


def start(
    spark: SparkSession,
    bronze: str,
    output: str,
    checkpoint: str,
    transform: BatchTransform,
    once: bool = True,
    interval: str = INTERVAL,
) -> StreamingQuery:
    """Starts the job; with `once`, it processes what is landed now and stops."""
    ship_by_value(spark, __name__, transform.__module__)

    def write(df: DataFrame, batch_id: int) -> None:
        transform(df).write.mode("overwrite").parquet(f"{output.rstrip('/')}/batch_id={batch_id}")

    writer = read_bronze(spark, bronze).writeStream.foreachBatch(write)
    writer = writer.option("checkpointLocation", checkpoint)
    return triggered(writer, once, interval).start()


def load_transform(reference: str) -> BatchTransform:
    module_name, _, name = reference.partition(":")
    try:
        transform = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise SystemExit(f"bronze_job: cannot load transform {reference!r}: {error}") from None
    if not callable(transform):
        raise SystemExit(f"bronze_job: {reference!r} is not a function")
    return transform  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bronze", required=True, help="the landing path the workers write")
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True, help="the job's own checkpoint")
    parser.add_argument(
        "--transform", required=True, help='"module:function", DataFrame -> DataFrame'
    )
    add_trigger_arguments(parser, interval=INTERVAL)
    args = parser.parse_args(argv)
    basic_logging()
    transform = load_transform(args.transform)
    query = start(
        spark_session(),
        args.bronze,
        args.output,
        args.checkpoint,
        transform,
        args.once,
        args.interval,
    )
    run_to_end(query)


if __name__ == "__main__":
    main()
