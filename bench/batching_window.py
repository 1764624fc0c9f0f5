"""reading.maxBatchingWindowSeconds on a quiet stream (issue 43): what a trickle costs in
process_records calls, and what each record waits for the window.

The real threaded worker runtime reads kinesalite (its leases from an in-process
LeaseCoordinator), 2 shards, a producer putting RATE records a second (one at a time,
each carrying the moment of its put) for SECONDS once both shards are initialized. The
processor notes each call's start. Per window: the calls, records per call, and each
record's wait, put to the start of its call (p50, p99, max). The figures are ratios to
the same run's window 0 (each read a call of its own): calls_ratio is the share of the
calls left, wait_added_p50 the seconds the window added to the median wait."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import ClassVar

from bench.results import percentile, record
from bench.scratch import kinesalite
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo
from streamconsumer.worker.source import worker_source
from testbed.in_process import emulator_worker, run_worker
from testbed.kinesis import KinesisEmulator, create_stream, put_records

SHARDS = 2
RATE = 20.0  # records a second, over both shards
SECONDS = 20.0
WINDOWS = (0.0, 0.5, 1.0, 2.0)


class Noted(BaseRecordProcessor):
    """Notes each call's start and its records' put times; `ready` once both shards run."""

    lock = threading.Lock()
    waits: ClassVar[list[float]] = []
    calls = 0
    started = 0
    ready = threading.Event()

    def initialize(self, shard: ShardInfo) -> None:
        with self.lock:
            Noted.started += 1
            if Noted.started == SHARDS:
                self.ready.set()

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        now = time.time()
        with self.lock:
            Noted.calls += 1
            self.waits.extend(now - float(r.data) for r in records)
        checkpointer.checkpoint()

    @classmethod
    def reset(cls) -> None:
        cls.waits, cls.calls, cls.started, cls.ready = [], 0, 0, threading.Event()


def trickle(emulator: KinesisEmulator, stream: str, count: int) -> None:
    Noted.ready.wait(60)
    start = time.monotonic()
    for n in range(count):
        time.sleep(max(0.0, start + n / RATE - time.monotonic()))
        put_records(emulator.client, stream, [(f"k{n}", repr(time.time()).encode())])


def measure(emulator: KinesisEmulator, window: float) -> tuple[int, list[float]]:
    stream = f"window-{int(window * 1000)}"
    create_stream(emulator.client, stream, SHARDS)
    Noted.reset()
    count = int(RATE * SECONDS)
    producer = threading.Thread(target=trickle, args=(emulator, stream, count), daemon=True)
    producer.start()
    config = emulator_worker(emulator, stream, max_batching_window_seconds=window)
    run_worker(config, worker_source(config), Noted, lambda: len(Noted.waits) >= count, 120)
    producer.join(10)
    assert len(Noted.waits) == count, f"window {window}: {len(Noted.waits)} of {count} records"
    return Noted.calls, sorted(Noted.waits)


def main() -> None:
    figures: dict[str, float] = {}
    with contextlib.ExitStack() as cleanup:
        emulator = cleanup.enter_context(kinesalite())
        print(
            f"batching window: {RATE:g} records/s for {SECONDS:g} s over {SHARDS} shards, "
            "kinesalite, default reading settings; wait = put to the start of its call"
        )
        print(f"  {'window':>7} {'calls':>6} {'records/call':>13} {'p50':>7} {'p99':>7} {'max':>7}")
        baseline: tuple[int, list[float]] | None = None
        for window in WINDOWS:
            calls, waits = measure(emulator, window)
            baseline = baseline or (calls, waits)
            p50, p99 = percentile(waits, 0.5), percentile(waits, 0.99)
            print(
                f"  {window:6.1f}s {calls:6d} {len(waits) / calls:13.1f} "
                f"{p50:6.3f}s {p99:6.3f}s {waits[-1]:6.3f}s"
            )
            if window:
                key = f"batching_window_{int(window * 1000)}ms"
                figures[f"{key}_calls_ratio"] = round(calls / baseline[0], 3)
                figures[f"{key}_wait_added_p50"] = round(p50 - percentile(baseline[1], 0.5), 3)
                figures[f"{key}_wait_max"] = round(waits[-1], 3)
    print("  (calls_ratio: calls / window 0's, same run; a record waits at most the window more)")
    record(figures)


if __name__ == "__main__":
    main()
