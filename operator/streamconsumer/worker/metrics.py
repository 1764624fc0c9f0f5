"""Worker metrics (Prometheus), served on STREAMCONSUMER_METRICS_PORT when it is set."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECORDS = Counter("streamconsumer_worker_records", "Records processed.", ["shard"])
BYTES = Counter("streamconsumer_worker_bytes", "Record bytes processed.", ["shard"])
PROCESS_SECONDS = Histogram(
    "streamconsumer_worker_process_seconds",
    "Time in process_records per batch (failed attempts included).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
PROCESS_FAILURES = Counter(
    "streamconsumer_worker_process_failures", "process_records calls that raised.", ["shard"]
)
MILLIS_BEHIND = Gauge(
    "streamconsumer_worker_millis_behind_latest", "MillisBehindLatest per held shard.", ["shard"]
)


def serve(port: int | None) -> None:
    if port:
        start_http_server(port)
