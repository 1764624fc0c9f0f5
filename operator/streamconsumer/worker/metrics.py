"""Worker metrics (Prometheus), served on STREAMCONSUMER_METRICS_PORT when it is set."""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from streamconsumer.processor import Record

RECORDS = Counter("streamconsumer_worker_records", "Records processed.", ["shard"])
BYTES = Counter("streamconsumer_worker_bytes", "Record bytes processed.", ["shard"])
PROCESS_SECONDS = Histogram(
    "streamconsumer_worker_process_seconds",
    "Time in process_records per batch (failed attempts included).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
PROCESS_FAILURES = Counter(
    "streamconsumer_worker_process_failures", "Processor calls that raised.", ["shard"]
)
DEAD_LETTERED = Counter(
    "streamconsumer_worker_dead_lettered_records",
    "Records the failure policy wrote to the dead-letter target.",
    ["shard"],
)
SKIPPED = Counter(
    "streamconsumer_worker_skipped_records", "Records the failure policy skipped.", ["shard"]
)
MILLIS_BEHIND = Gauge(
    "streamconsumer_worker_millis_behind_latest", "MillisBehindLatest per held shard.", ["shard"]
)


def batch_processed(shard: str, records: Sequence[Record], started: float) -> None:
    PROCESS_SECONDS.observe(time.perf_counter() - started)
    RECORDS.labels(shard).inc(len(records))
    BYTES.labels(shard).inc(sum(len(r.data) for r in records))


def batch_failed(shard: str, started: float) -> None:
    PROCESS_SECONDS.observe(time.perf_counter() - started)
    PROCESS_FAILURES.labels(shard).inc()


def serve(port: int | None) -> None:
    if port:
        start_http_server(port)
