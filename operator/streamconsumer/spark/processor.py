"""SparkBatchProcessor: a record processor that hands batches to a PySpark pipeline.

Each batch becomes an Arrow table, then a DataFrame; your `transform(df, batch)` runs on
it and the sink writes the result; the checkpoint moves only after the sink returns.
Heartbeats run on the worker's own thread, so a slow Spark job never costs the lease
(keep a batch well within it). The worker calls `warm_up()` before it takes any lease,
so the JVM start and the first job are paid before the first batch, not during it."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from streamconsumer.processor import Record, ShardInfo
from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.spark.schema import to_arrow
from streamconsumer.spark.session import spark_session
from streamconsumer.spark.sinks import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

Transform = Callable[["DataFrame", BatchInfo], "DataFrame"]


class SparkBatchProcessor(BatchingProcessor):
    def __init__(
        self,
        transform: Transform,
        sink: Sink,
        stream: str | None = None,
        max_records: int = 100_000,
        max_wait: float = 5.0,
        session: Callable[[], SparkSession] | None = None,
        spark_conf: Mapping[str, str] | None = None,
    ) -> None:
        """`spark_conf`: the pipeline's Spark settings (see session.py for the order in
        which they apply); `session` replaces how the session is made (tests)."""
        super().__init__(stream, max_records, max_wait)
        self.transform = transform
        self.sink = sink
        self._session = session or functools.partial(
            spark_session, getattr(sink, "spark_conf", None), spark_conf
        )

    def warm_up(self) -> None:
        started = time.monotonic()
        self._session().range(1).count()
        log.info("spark session ready in %.1fs", time.monotonic() - started)

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.spark = self._session()  # the warmed-up session (getOrCreate)

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        frame = self.spark.createDataFrame(to_arrow(self.stream, batch.shard_id, records))
        self.sink.write(self.transform(frame, batch), batch)
