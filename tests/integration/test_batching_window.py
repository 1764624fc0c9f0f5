"""reading.maxBatchingWindowSeconds through the real threaded worker runtime on the Kinesis
emulator (its leases from an in-process LeaseCoordinator): a trickle of records, one every
TRICKLE_SECONDS, costs a call per window instead of one per read, every record once and in
order, and no call comes later than the window after its first record's put (plus a
read's round trip). The latencies are printed; `make bench` measures them apart."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.worker.phase import Phase
from streamconsumer.worker.runtime import Worker
from streamconsumer.worker.source import worker_source
from testbed.in_process import InProcessOperator
from testbed.kinesis import REGION, KinesisEmulator, create_stream, put_records
from testbed.specs import worker_config

RECORDS = 30
TRICKLE_SECONDS = 0.1
WINDOW_SECONDS = 1.0
Calls = list[tuple[float, list[float]]]  # when each call began, its records' put times


class Timed(BaseRecordProcessor):
    """Each call's records (their data: the moment of their put) and when it began."""

    calls: ClassVar[Calls] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.calls.append((time.time(), [float(r.data) for r in records]))
        checkpointer.checkpoint()


def trickle(kinesis: KinesisEmulator, stream: str) -> None:
    for _ in range(RECORDS):
        put_records(kinesis.client, stream, [("k", repr(time.time()).encode())])
        time.sleep(TRICKLE_SECONDS)


def consume(
    kinesis: KinesisEmulator, stream: str, window: float
) -> list[tuple[float, list[float]]]:
    """The calls a worker made of a trickle of RECORDS, with this batching window."""
    Timed.calls = []
    create_stream(kinesis.client, stream, shards=1)
    config = worker_config(
        stream_name=stream,
        endpoint_url=kinesis.endpoint_url,
        region=REGION,
        idle_between_reads_ms=100,
        max_batching_window_seconds=window,
    )
    source = worker_source(config)
    worker = Worker(config, InProcessOperator(source.list_shards()), source, Timed)  # type: ignore[arg-type]
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        deadline = time.monotonic() + 30
        while not any(m.phase is Phase.PROCESSING for m in list(worker.core.machines.values())):
            assert time.monotonic() < deadline, "the worker took its shard"
            time.sleep(0.05)
        trickle(kinesis, stream)
        deadline = time.monotonic() + 30
        while sum(len(r) for _, r in Timed.calls) < RECORDS and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.drain()
        running.join(20)
    return Timed.calls


@pytest.mark.usefixtures("credentials")
def test_a_trickle_costs_a_call_per_window_and_waits_at_most_the_window(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    at_once = consume(kinesis, stream_name, window=0.0)
    gathered = consume(kinesis, stream_name + "-w", window=WINDOW_SECONDS)
    for calls in (at_once, gathered):
        puts = [put for _, records in calls for put in records]
        assert len(puts) == RECORDS, "every record once"
        assert puts == sorted(puts), "in order"
    waits = [began - records[0] for began, records in gathered]
    print(
        f"\n{RECORDS} records, one every {TRICKLE_SECONDS} s: {len(at_once)} calls at once, "
        f"{len(gathered)} with a {WINDOW_SECONDS} s window; a call's first record waited "
        f"{min(waits):.2f} to {max(waits):.2f} s"
    )
    span = gathered[-1][1][-1] - gathered[0][1][0]  # the puts take their time too
    assert len(gathered) <= span / WINDOW_SECONDS + 2, "a call per window"
    assert len(gathered) < len(at_once) / 2
    # A call's first record was read within a read's round trip of its put (reads every
    # 100 ms at most on a caught-up shard): it waited the window from then, not longer.
    assert max(waits) < WINDOW_SECONDS + 1.0
