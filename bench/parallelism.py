"""processor.parallelism (issue 29): the real threaded worker runtime reading a backlog
from the Kinesis emulator, its leases from an in-process LeaseCoordinator (no HTTP, no
Kubernetes: what is measured is the worker), with a processor that spends 3 ms per
record (an API call per record). Parallelism 10 against 1, in the same run:

- records/s from the first processor call to the last record done;
- per-key order: each key's records done in sequence order, never two calls of a key
  at once (any breach is counted; the figure must be 0);
- reads per shard in any one second (Kinesis allows 5): the parallelism comes from
  splitting each read over the calls, not from more reads.

Both runs read at `reading.maxReadsPerSecond: 5`, the most Kinesis allows (default read
size, 1,000 records): at the default 2 reads a second, reading 3,000 records a shard
takes a second and a half whatever the processor does, and that, not the processor,
would cap the parallel run.

A third run, the baseline of the design's choice, hashes each key to one of the 10 calls
(as Lambda's ParallelizationFactor does) instead of spreading each batch's keys evenly:
the calls' loads are uneven and the slowest sets the pace."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

from bench.results import record
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.worker import lanes
from streamconsumer.worker.source import worker_source
from testbed.in_process import TimedReads, emulator_worker, run_worker
from testbed.kinesis import KinesisEmulator, create_stream, put_records

RECORDS = 6_000
KEYS = 1_000
SHARDS = 2
SECONDS_PER_RECORD = 0.003
READS_PER_SECOND = 5.0


class Ledger:
    """What the processors did, from every thread: order and overlap breaches per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.first_call: float | None = None
        self.last_done = 0.0
        self.last_sequence: dict[str, int] = {}
        self.running: set[str] = set()
        self.violations = 0

    def begin(self, keys: set[str]) -> None:
        with self.lock:
            if self.first_call is None:
                self.first_call = time.perf_counter()
            self.violations += len(keys & self.running)
            self.running |= keys

    def did(self, record: Record) -> None:
        sequence = int(record.sequence_number)
        with self.lock:
            before = self.last_sequence.get(record.partition_key, -1)
            self.violations += sequence <= before
            self.last_sequence[record.partition_key] = sequence
            self.done += 1
            self.last_done = time.perf_counter()

    def end(self, keys: set[str]) -> None:
        with self.lock:
            self.running -= keys


class ApiCalls(BaseRecordProcessor):
    """One API call (3 ms) per record."""

    ledger = Ledger()

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        keys = {r.partition_key for r in records}
        self.ledger.begin(keys)
        try:
            for record in records:
                time.sleep(SECONDS_PER_RECORD)
                self.ledger.did(record)
        finally:
            self.ledger.end(keys)
        checkpointer.checkpoint()


def most_in_a_second(source: TimedReads) -> int:
    """The most reads of one shard begun within one second."""
    most = 0
    for reads in source.reads.values():
        window: deque[float] = deque()
        for read in reads:
            window.append(read.started)
            while read.started - window[0] >= 1.0:
                window.popleft()
            most = max(most, len(window))
    return most


def hashed_lanes(records: Sequence[Record], parallelism: int) -> list[list[int]]:
    """The baseline split: each key to a fixed call by a hash of it."""
    groups: list[list[int]] = [[] for _ in range(parallelism)]
    for index, one in enumerate(records):
        groups[zlib.crc32(one.partition_key.encode()) % parallelism].append(index)
    return [group for group in groups if group]


def fill(emulator: KinesisEmulator, stream: str) -> None:
    """RECORDS records over KEYS keys, the keys' records interleaved (as clicks arrive)."""
    create_stream(emulator.client, stream, SHARDS)
    rounds = RECORDS // KEYS
    records = [(f"user-{key}", b"x" * 100) for _ in range(rounds) for key in range(KEYS)]
    put_records(emulator.client, stream, records)


def measure(
    emulator: KinesisEmulator, stream: str, parallelism: int
) -> tuple[float, int, int, float]:
    """records/s, per-key order breaches, most reads of one shard in one second, and the
    median GetRecords time (the emulator's: reads come one after another per shard)."""
    ApiCalls.ledger = ledger = Ledger()
    config = emulator_worker(
        emulator,
        stream,
        parallelism=parallelism,
        max_reads_per_second=READS_PER_SECOND,
    )
    source = TimedReads(worker_source(config))
    run_worker(config, source, ApiCalls, lambda: ledger.done >= RECORDS, 120)
    assert ledger.done >= RECORDS, f"parallelism {parallelism}: {ledger.done} records done"
    assert ledger.first_call is not None
    rate = RECORDS / (ledger.last_done - ledger.first_call)
    durations = sorted(r.seconds for reads in source.reads.values() for r in reads if r.records)
    return rate, ledger.violations, most_in_a_second(source), durations[len(durations) // 2]


def main() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # the emulator takes any
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with contextlib.ExitStack() as cleanup:
        emulator = cleanup.enter_context(KinesisEmulator.start("kinesalite"))
        print(
            f"processor.parallelism: {RECORDS} records over {KEYS} keys on {SHARDS} shards, "
            f"{SECONDS_PER_RECORD * 1000:g} ms per record, kinesalite:"
        )
        figures: dict[str, float] = {}
        rates = {}
        for name, parallelism in (("1", 1), ("10", 10), ("10_hashed", 10)):
            stream = f"parallelism-{name.replace('_', '-')}"
            fill(emulator, stream)
            split = hashed_lanes if name.endswith("hashed") else lanes.split
            with mock.patch.object(lanes, "split", split):
                rate, violations, reads, read_seconds = measure(emulator, stream, parallelism)
            rates[name] = rate
            figures[f"parallelism_{name}_records_per_second"] = round(rate)
            figures[f"parallelism_{name}_key_order_violations"] = violations
            figures[f"parallelism_{name}_max_reads_per_shard_second"] = reads
            print(
                f"  parallelism {name:9}: {rate:7.0f} records/s, {violations} per-key "
                f"order violations, at most {reads} reads of a shard in a second, "
                f"GetRecords {read_seconds:.2f} s (median)"
            )
        speedup = rates["10"] / rates["1"]
        figures["per_key_parallelism_speedup"] = round(speedup, 2)
        hashed = rates["10_hashed"] / rates["1"]
        figures["per_key_parallelism_hashed_lanes_speedup"] = round(hashed, 2)
        print(
            f"  speedup {speedup:.2f}x (parallelism 10 against 1, same run); "
            f"with keys hashed to lanes {hashed:.2f}x"
        )
        record(figures)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
