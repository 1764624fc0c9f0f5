"""Async processors (issue 29): the real threaded worker runtime reading bench.parallelism's
backlog (6,000 records over 1,000 keys on 2 shards, kinesalite), leased in process,
`processor.parallelism` 1, each processor written both ways:

- I/O-bound, 3 ms a record (an API call per record). The threaded one calls in turn, as a
  blocking client does; the async one awaits up to 10 calls at once within a batch, one
  key's records in order (asyncio.gather behind a semaphore, as with an async client's
  pool of 10 connections). Same records, same reads: the figure is records/s, async
  against threaded.
- CPU-bound, 0.3 ms of hashing a record. The loop runs one call at a time as the GIL
  runs one thread at a time: neither uses a second core, so the figure stays near 1 (the
  loop's hand-over per call against the threads' switching). CPU-bound code wants more
  cores, not async.

Records/s from the first processor call to the last record done, per-key order checked
(bench.parallelism's Ledger: breaches counted, the figure must be 0)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench.parallelism import RECORDS, SECONDS_PER_RECORD, Ledger, fill
from bench.results import record
from bench.scratch import kinesalite
from streamconsumer.awaiting import AsyncBaseRecordProcessor, AsyncFactory
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, ProcessorFactory, Record
from streamconsumer.worker.source import worker_source
from testbed.in_process import TimedReads, emulator_worker, run_worker
from testbed.kinesis import KinesisEmulator

CONNECTIONS = 10  # the async processor's calls in flight at once (its client's pool)
HASH_ROUNDS = 400  # sha256 rounds of a 100-byte record: about 0.3 ms of CPU here

ledger = Ledger()


def hashed(record: Record) -> bytes:
    digest = record.data
    for _ in range(HASH_ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return digest


class ThreadedCalls(BaseRecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        ledger.begin(set())  # (the first call's time)
        for one in records:
            time.sleep(SECONDS_PER_RECORD)
            ledger.did(one)
        checkpointer.checkpoint()


class AsyncCalls(AsyncBaseRecordProcessor):
    async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        ledger.begin(set())
        pool = asyncio.Semaphore(CONNECTIONS)
        by_key: dict[str, list[Record]] = defaultdict(list)
        for one in records:
            by_key[one.partition_key].append(one)

        async def key_in_order(mine: list[Record]) -> None:
            for one in mine:
                async with pool:
                    await asyncio.sleep(SECONDS_PER_RECORD)
                ledger.did(one)

        await asyncio.gather(*(key_in_order(mine) for mine in by_key.values()))
        checkpointer.checkpoint()


class ThreadedHashing(BaseRecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        ledger.begin(set())  # (the first call's time)
        for one in records:
            hashed(one)
            ledger.did(one)
        checkpointer.checkpoint()


class AsyncHashing(AsyncBaseRecordProcessor):
    async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        ledger.begin(set())
        for one in records:
            hashed(one)
            ledger.did(one)
        checkpointer.checkpoint()


def measure(emulator: KinesisEmulator, stream: str, factory: ProcessorFactory) -> float:
    """records/s; raises if a key's records were done out of order."""
    global ledger
    ledger = Ledger()
    fill(emulator, stream)
    config = emulator_worker(
        emulator,
        stream,
        max_reads_per_second=5.0,
    )
    run_worker(
        config, TimedReads(worker_source(config)), factory, lambda: ledger.done >= RECORDS, 180
    )
    assert ledger.done >= RECORDS, f"{stream}: {ledger.done} records done"
    assert ledger.violations == 0, f"{stream}: {ledger.violations} per-key order breaches"
    assert ledger.first_call is not None
    return RECORDS / (ledger.last_done - ledger.first_call)


def main() -> None:
    with contextlib.ExitStack() as cleanup:
        emulator = cleanup.enter_context(kinesalite())
        print(f"async processors: {RECORDS} records on 2 shards, parallelism 1, kinesalite:")
        rates: dict[str, float] = {}
        for name, factory in (
            ("io_threaded", ThreadedCalls),
            ("io_async", AsyncFactory(AsyncCalls)),
            ("cpu_threaded", ThreadedHashing),
            ("cpu_async", AsyncFactory(AsyncHashing)),
        ):
            rates[name] = measure(emulator, f"async-{name.replace('_', '-')}", factory)
            print(f"  {name:12}: {rates[name]:7.0f} records/s")
        io = rates["io_async"] / rates["io_threaded"]
        cpu = rates["cpu_async"] / rates["cpu_threaded"]
        print(
            f"  I/O-bound ({SECONDS_PER_RECORD * 1000:g} ms a record, {CONNECTIONS} awaited at "
            f"once): async {io:.2f}x the threaded worker; CPU-bound: {cpu:.2f}x"
        )
        record(
            {
                **{f"async_{name}_records_per_second": round(rate) for name, rate in rates.items()},
                "async_io_bound_speedup": round(io, 2),
                "async_cpu_bound_ratio": round(cpu, 2),
            }
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
