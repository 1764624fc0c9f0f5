"""processor.batchSize through the real threaded worker runtime on the Kinesis emulator
(its leases from an in-process LeaseCoordinator): a read delivered in calls one after
another is timed call by call (`onFailure.timeoutSeconds`), and a drain's hand-off stops
the read's remaining calls, releasing at the last one done, so that the next worker
takes over at once and processes no record twice (issue 29)."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.worker.runtime import Worker
from streamconsumer.worker.source import worker_source
from testbed.in_process import InProcessOperator
from testbed.kinesis import REGION, KinesisEmulator, create_stream, put_records
from testbed.specs import worker_config

RECORDS = 60
BATCH_SIZE = 5
SECONDS_PER_CALL = 0.4  # a read of 60 records: 12 calls, 4.8 s, against a 2 s timeout


class Slow(BaseRecordProcessor):
    calls: ClassVar[list[tuple[str, list[str]]]] = []  # (which worker, the call's records)
    lock = threading.Lock()
    name = ""

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        time.sleep(SECONDS_PER_CALL)
        with self.lock:
            self.calls.append((self.name, [r.data.decode() for r in records]))


class First(Slow):
    name = "first"


class Second(Slow):
    name = "second"


@pytest.mark.usefixtures("credentials")
def test_calls_in_turn_are_timed_each_and_a_hand_off_stops_the_rest(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    create_stream(kinesis.client, stream_name, shards=1)
    put_records(kinesis.client, stream_name, [("k", b"%d" % n) for n in range(RECORDS)])
    config = worker_config(
        stream_name=stream_name,
        endpoint_url=kinesis.endpoint_url,
        region=REGION,
        batch_size=BATCH_SIZE,
        max_records=100,
        drain_seconds=20,
        on_failure={"timeoutSeconds": 2},
    )
    source = worker_source(config)
    operator = InProcessOperator(source.list_shards())
    exits: dict[str, int] = {}

    def run(worker: Worker, name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: exits.setdefault(name, worker.run()))
        thread.start()
        return thread

    first = Worker(config, operator, source, First)  # type: ignore[arg-type]
    running = run(first, "first")
    deadline = time.monotonic() + 30
    while len(Slow.calls) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(Slow.calls) >= 6, "six calls of the read, 2.4 s, past the 2 s timeout"
    first.drain()
    drained_at = time.monotonic()
    running.join(20)
    assert exits.get("first") == 0, "not taken for hung: each call is timed on its own"
    first_calls = [records for name, records in Slow.calls if name == "first"]
    assert len(first_calls) < RECORDS // BATCH_SIZE, "the hand-off stopped the read's calls"
    assert time.monotonic() - drained_at < 2.5, "it did not wait for the whole read"
    (lease,) = operator.coordinator.leases.values()
    assert lease.owner is None, "released"
    last_done = first_calls[-1][-1]
    assert lease.checkpoint is not None
    after = kinesis.client.get_records(
        ShardIterator=kinesis.client.get_shard_iterator(
            StreamName=stream_name,
            ShardId=lease.shard_id,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=lease.checkpoint,
        )["ShardIterator"]
    )["Records"]
    assert after[0]["Data"] == last_done.encode(), "released at the last record done"

    second = Worker(config.model_copy(update={"worker_name": "w2"}), operator, source, Second)  # type: ignore[arg-type]
    running = run(second, "second")
    try:
        deadline = time.monotonic() + 30
        while (
            sum(len(records) for _, records in Slow.calls) < RECORDS and time.monotonic() < deadline
        ):
            time.sleep(0.05)
    finally:
        second.drain()
        running.join(20)
    done = [data for _, records in Slow.calls for data in records]
    assert done == [str(n) for n in range(RECORDS)], "every record once, in order"
