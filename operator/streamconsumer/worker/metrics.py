"""Worker metrics (Prometheus), served on STREAMCONSUMER_METRICS_PORT when it is set. Per-shard
series go when the shard leaves this worker, so a reshard or a DynamoDB shard rollover does
not grow them for ever. The pod's labels (namespace, consumer) are the scrape's."""

from __future__ import annotations

import contextlib
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
    "streamconsumer_worker_process_failures",
    "Processor calls that raised, or reported some of their records failed.",
    ["shard"],
)
DEAD_LETTERED = Counter(
    "streamconsumer_worker_dead_lettered_records",
    "Records the failure policy wrote to the dead-letter target.",
    ["shard"],
)
SKIPPED = Counter(
    "streamconsumer_worker_skipped_records", "Records the failure policy skipped.", ["shard"]
)
FILTERED = Counter(
    "streamconsumer_worker_filtered_records",
    "Records processor.filter kept from the processor (checkpointed past without a call).",
    ["shard"],
)
SECONDS_BEHIND = Gauge(
    "streamconsumer_worker_seconds_behind_latest",
    "How far a held shard is behind the stream's tip (MillisBehindLatest / 1000).",
    ["shard"],
)
READ_FAILURES = Counter(
    "streamconsumer_worker_read_failures",
    "Reads (GetRecords) that failed after the AWS client's own retries; `throttled` says "
    "whether the stream's read limit refused them.",
    ["shard", "throttled"],
)
_THROTTLED = {
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
}
_COUNTERS = (RECORDS, BYTES, PROCESS_FAILURES, DEAD_LETTERED, SKIPPED, FILTERED)


def batch_processed(shard: str, records: Sequence[Record], started: float) -> None:
    PROCESS_SECONDS.observe(time.perf_counter() - started)
    RECORDS.labels(shard).inc(len(records))
    BYTES.labels(shard).inc(sum(len(r.data) for r in records))


def batch_partly_failed(shard: str, done: Sequence[Record], started: float) -> None:
    """A partial batch response: `done` are processed, the call counts as a failure."""
    batch_processed(shard, done, started)
    PROCESS_FAILURES.labels(shard).inc()


def batch_failed(shard: str, started: float) -> None:
    PROCESS_SECONDS.observe(time.perf_counter() - started)
    PROCESS_FAILURES.labels(shard).inc()


def filtered(shard: str, count: int) -> None:
    if count:
        FILTERED.labels(shard).inc(count)


def behind(shard: str, millis: int) -> None:
    SECONDS_BEHIND.labels(shard).set(millis / 1000)


def read_failed(shard: str, error: BaseException) -> bool:
    """Counts a failed read; True if the stream throttled it (answered by back-off, and
    by this count rather than a WARNING per call)."""
    response = getattr(error, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    throttled = code in _THROTTLED
    READ_FAILURES.labels(shard, "true" if throttled else "false").inc()
    return throttled


def shard_started(shard: str) -> None:
    """Its counters start at 0 here: an alert on their increase sees the first one."""
    for counter in _COUNTERS:
        counter.labels(shard)


def shard_left(shard: str) -> None:
    """Removes the shard's series: it ended, or was handed off or lost."""
    for metric in (*_COUNTERS, SECONDS_BEHIND):
        with contextlib.suppress(KeyError):  # never set here
            metric.remove(shard)
    for throttled in ("true", "false"):
        with contextlib.suppress(KeyError):
            READ_FAILURES.remove(shard, throttled)


def serve(port: int | None, address: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, address)
