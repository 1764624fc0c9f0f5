"""worker_busy_fraction (issue 29): how much of the time a shard's processor is in a call
while the shard has a backlog, parallelism 1, a processor that takes 250 ms a call.

The set-up is bench/parallelism.py's: the real threaded worker runtime reading from
kinesalite, its leases from an in-process LeaseCoordinator. Each of the 2 shards holds a
backlog of READS_PER_SHARD full reads (1,000 records each, the default read size). The
processor sleeps 250 ms per process_records call and notes each call's start and end.

Busy fraction of a shard = time inside calls / (last call's end - first call's start);
`worker_busy_fraction` is the smallest over the shards, at the default reading settings.
Beside it, the same at `reading.maxReadsPerSecond` 2 (the default before 0.2.0) and 5
(Kinesis allows 5 GetRecords a second per shard), and at 2 with `processor.batchSize` 500
and 250 (a read gives 2 or 4 calls), each with the GetRecords per shard per second seen
while the shard was being processed.

A processor that takes 250 ms a call needs 4 calls a second to stay busy. Each call is
one read unless batchSize splits it, so the read pace caps the busy fraction at
reads per second x calls per read x 0.25 s (0.5 at 2 reads a second, over a long
backlog; a short one shows more: n calls take n x 0.25 s of a span of
(n - 1) x 0.5 + 0.25 s, 0.6 for 3)."""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import record
from bench.scratch import kinesalite
from streamconsumer.models.resource import MAX_READS_PER_SECOND
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo
from streamconsumer.worker.source import worker_source
from testbed.in_process import TimedReads, emulator_worker, run_worker
from testbed.kinesis import (
    KinesisEmulator,
    create_stream,
    list_all_shards,
    put_records,
)

SHARDS = 2
READ_SIZE = 1_000  # reading.maxRecords' default: what one GetRecords brings of a backlog
READS_PER_SHARD = 16
SECONDS_PER_CALL = 0.25
TARGET = 0.95


@dataclass(frozen=True)
class Variant:
    key: str  # the figures' names: worker_busy_fraction{key}, ...
    title: str
    settings: dict[str, Any]  # worker configuration beyond the defaults


SLOW = {"max_reads_per_second": 2.0}  # the default until 0.2.0's
VARIANTS = (
    Variant("", f"defaults ({MAX_READS_PER_SECOND:g} reads/s, prefetch 3)", {}),
    Variant("_max_reads_2", "maxReadsPerSecond: 2", SLOW),
    Variant("_max_reads_5", "maxReadsPerSecond: 5", {"max_reads_per_second": 5.0}),
    Variant("_batch_size_500", "batchSize: 500 at 2 reads/s", {**SLOW, "batch_size": 500}),
    Variant("_batch_size_250", "batchSize: 250 at 2 reads/s", {**SLOW, "batch_size": 250}),
)


class Calls:
    """Each shard's process_records calls, as (start, end) in perf_counter seconds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.records: dict[str, int] = defaultdict(int)

    def add(self, shard: str, start: float, end: float, records: int) -> None:
        with self.lock:
            self.spans[shard].append((start, end))
            self.records[shard] += records

    def done(self) -> int:
        with self.lock:
            return sum(self.records.values())


class SlowCalls(BaseRecordProcessor):
    """250 ms per call, whatever the call's size; each call's span noted."""

    calls = Calls()

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.shard_id = shard.shard_id

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        start = time.perf_counter()
        time.sleep(SECONDS_PER_CALL)
        self.calls.add(self.shard_id, start, time.perf_counter(), len(records))
        checkpointer.checkpoint()


def fill(emulator: KinesisEmulator, stream: str) -> int:
    """READS_PER_SHARD x READ_SIZE records on each shard (keys chosen by the shards' hash
    ranges, so that every shard's backlog is the same); returns how many in all."""
    create_stream(emulator.client, stream, SHARDS)
    ranges = [
        (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in list_all_shards(emulator.client, stream)
    ]
    per_shard = READS_PER_SHARD * READ_SIZE
    keys: list[list[str]] = [[] for _ in ranges]
    candidate = 0
    while any(len(mine) < 100 for mine in keys):
        key = f"user-{candidate}"
        # Kinesis maps a partition key to a shard by its MD5
        hashed = int(hashlib.md5(key.encode(), usedforsecurity=False).hexdigest(), 16)
        shard = next(i for i, (low, high) in enumerate(ranges) if low <= hashed <= high)
        if len(keys[shard]) < 100:
            keys[shard].append(key)
        candidate += 1
    records = [(mine[n % len(mine)], b"x" * 100) for n in range(per_shard) for mine in keys]
    put_records(emulator.client, stream, records)
    return len(records)


@dataclass(frozen=True)
class Shares:
    busy: dict[str, float]  # per shard
    reads_per_second: dict[str, float]  # per shard, GetRecords while processing
    calls: int
    records_per_read: float
    read_seconds: float  # the median GetRecords time of reads that brought records


def measure(emulator: KinesisEmulator, variant: Variant) -> Shares:
    stream = "busy" + (variant.key.replace("_", "-") or "-defaults")
    total = fill(emulator, stream)
    SlowCalls.calls = calls = Calls()
    config = emulator_worker(
        emulator,
        stream,
        **variant.settings,
    )
    source = TimedReads(worker_source(config))
    run_worker(config, source, SlowCalls, lambda: calls.done() >= total, 180)
    assert calls.done() >= total, f"{variant.title}: {calls.done()} of {total} records done"
    busy: dict[str, float] = {}
    rates: dict[str, float] = {}
    for shard, spans in calls.spans.items():
        first, last = spans[0][0], spans[-1][1]
        busy[shard] = sum(end - start for start, end in spans) / (last - first)
        during = [r for r in source.reads[shard] if first - 1.0 <= r.started <= last and r.records]
        # reads that brought records: from the first one's start to the last one's
        if len(during) > 1:
            rates[shard] = (len(during) - 1) / (during[-1].started - during[0].started)
    full = [r for reads in source.reads.values() for r in reads if r.records]
    return Shares(
        busy,
        rates,
        sum(len(spans) for spans in calls.spans.values()),
        sum(r.records for r in full) / len(full),
        sorted(r.seconds for r in full)[len(full) // 2],
    )


def main() -> None:
    figures: dict[str, float] = {}
    with contextlib.ExitStack() as cleanup:
        emulator = cleanup.enter_context(kinesalite())
        print(
            f"worker_busy_fraction: parallelism 1, {SECONDS_PER_CALL * 1000:g} ms a call, "
            f"{READS_PER_SHARD} reads' backlog ({READS_PER_SHARD * READ_SIZE} records) on "
            f"each of {SHARDS} shards, kinesalite; busy = time in calls / (last call's end "
            f"- first call's start), the least busy shard; target >= {TARGET}"
        )
        print(
            f"  {'reading':34} {'busy':>5} {'reads/s/shard':>14} {'calls':>6} "
            f"{'records/read':>13} {'GetRecords':>11}"
        )
        for variant in VARIANTS:
            shares = measure(emulator, variant)
            least = min(shares.busy.values())
            rates = sorted(shares.reads_per_second.values())
            figures[f"worker_busy_fraction{variant.key}"] = round(least, 3)
            figures[f"worker_busy_reads_per_shard_second{variant.key}"] = round(max(rates), 2)
            rate_text = f"{rates[0]:.2f}-{rates[-1]:.2f}" if rates else "-"
            print(
                f"  {variant.title:34} {least:5.3f} {rate_text:>14} {shares.calls:6d} "
                f"{shares.records_per_read:13.0f} {shares.read_seconds:9.3f} s"
                f"{'' if least >= TARGET else '  (below target)'}"
            )
    print(
        "  (reads/s/shard: GetRecords that brought records while the shard was processed; "
        "GetRecords: the median time of those)"
    )
    record(figures)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
