"""The clickstream pipeline on Spark: page views per minute, in either mode.

- Spark in the worker: `PageViewsOnSpark` (a SparkBatchProcessor) runs the transform
  on each batch and writes it through a sink before the checkpoint moves.
  Entrypoint `clickstream.pipeline:PageViewsOnSpark`; CLICKSTREAM_OUTPUT is the table
  path, CLICKSTREAM_FORMAT is `parquet` (default) or `delta`.
- Bronze landing: `LandInBronze` (JVM-free workers) lands raw batches under
  CLICKSTREAM_BRONZE; the bronze job runs the same transform exactly once:
      python -m streamconsumer.spark.bronze_job \\
          --transform clickstream.pipeline:page_views_per_minute …

Both write partial counts (one row per minute and page per batch); a reader sums them,
as `read_page_views` does."""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow.dataset as ds

from streamconsumer.spark import (
    BatchInfo,
    BronzeProcessor,
    DeltaSink,
    ParquetSink,
    SparkBatchProcessor,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EVENT_SCHEMA = "page STRING, user STRING, ts STRING"


def page_views_per_minute(records: DataFrame) -> DataFrame:
    """Raw records -> (minute, page, views). Malformed events are dropped, never fatal."""
    from pyspark.sql import functions as F

    events = records.select(F.from_json(F.col("data").cast("string"), EVENT_SCHEMA).alias("e"))
    return (
        events.where(F.col("e.page").isNotNull() & F.col("e.ts").isNotNull())
        .groupBy(F.substring("e.ts", 1, 16).alias("minute"), F.col("e.page").alias("page"))
        .agg(F.count("*").alias("views"))
    )


def _per_batch(records: DataFrame, batch: BatchInfo) -> DataFrame:
    return page_views_per_minute(records)


class PageViewsOnSpark(SparkBatchProcessor):
    def __init__(self) -> None:
        output = os.environ.get("CLICKSTREAM_OUTPUT", "/data/page-views")
        delta = os.environ.get("CLICKSTREAM_FORMAT", "parquet") == "delta"
        super().__init__(
            _per_batch,
            DeltaSink(output) if delta else ParquetSink(output),
            max_records=int(os.environ.get("CLICKSTREAM_BATCH_RECORDS", "100000")),
            max_wait=float(os.environ.get("CLICKSTREAM_BATCH_SECONDS", "10")),
        )


class LandInBronze(BronzeProcessor):
    def __init__(self) -> None:
        super().__init__(
            os.environ.get("CLICKSTREAM_BRONZE", "/data/bronze"),
            max_records=int(os.environ.get("CLICKSTREAM_BATCH_RECORDS", "10000")),
            max_wait=float(os.environ.get("CLICKSTREAM_BATCH_SECONDS", "5")),
        )


def read_page_views(path: str) -> Counter[tuple[str, str]]:
    """Sums the partial counts under a Parquet output path (either mode)."""
    if not os.path.isdir(path):
        return Counter()
    dataset = ds.dataset(path, format="parquet", partitioning="hive")
    if not dataset.files:
        return Counter()
    table = dataset.to_table(columns=["minute", "page", "views"])
    views: Counter[tuple[str, str]] = Counter()
    columns = (table[name].to_pylist() for name in ("minute", "page", "views"))
    for minute, page, count in zip(*columns, strict=True):
        views[(minute, page)] += count
    return views
