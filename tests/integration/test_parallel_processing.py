"""processor.parallelism through the real threaded worker runtime on the Kinesis emulator
(its leases from an in-process LeaseCoordinator): calls of a shard at once, each key's
records in order, KPL user records split by their own keys, a failing call retried
without the other calls' records, and the checkpoint at the end."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from testbed.in_process import BRISK, drain_stream, emulator_worker
from testbed.kinesis import KinesisEmulator, put_records

pytestmark = pytest.mark.usefixtures("credentials")  # the worker's boto3 clients
KEYS = 7  # prime to the parallelism: no split by position keeps keys whole by chance
ROUNDS = 10


class Slow(BaseRecordProcessor):
    """10 ms a record; the first call holding key-3's fifth record raises."""

    lock = threading.Lock()
    done: ClassVar[list[tuple[str, bytes]]] = []
    calls: ClassVar[list[list[Record]]] = []
    in_flight = most_in_flight = 0
    failed = False

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        cls = type(self)
        with cls.lock:
            cls.calls.append(records)
            if b"key-3 4" in [r.data for r in records] and not cls.failed:
                cls.failed = True  # (before doing any: a call that raises did nothing)
                raise RuntimeError("the API said no, once")
            cls.in_flight += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            for record in records:
                time.sleep(0.01)
                with cls.lock:
                    cls.done.append((record.partition_key, record.data))
        finally:
            with cls.lock:
                cls.in_flight -= 1
        checkpointer.checkpoint()


def test_parallel_calls_keep_each_keys_order_and_checkpoint_what_was_done(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=1)
    plain = [(f"key-{k}", b"key-%d %d" % (k, n)) for n in range(ROUNDS) for k in range(KEYS)]
    put_records(client, stream_name, plain)
    aggregator = RecordAggregator()  # one Kinesis record, user records of 4 keys
    for k in range(4):
        aggregator.add_user_record(f"key-{k}", b"key-%d kpl" % k)
    key, _, data = aggregator.clear_and_get().get_contents()
    client.put_record(StreamName=stream_name, PartitionKey=key, Data=data)
    total = len(plain) + 4

    config = emulator_worker(kinesis, stream_name, parallelism=4, max_records=30, **BRISK)
    operator = drain_stream(config, Slow, lambda: len(Slow.done) >= total)

    assert len(Slow.done) == total, "every record once"
    for k in range(KEYS):
        mine = [d for key, d in Slow.done if key == f"key-{k}"]
        expected = [b"key-%d %d" % (k, n) for n in range(ROUNDS)]
        assert mine == [*expected, *([b"key-%d kpl" % k] if k < 4 else [])], f"key-{k} in order"
    assert Slow.most_in_flight > 1, "calls of the shard ran at once"
    failed = next(call for call in Slow.calls if b"key-3 4" in [r.data for r in call])
    spared = {r.partition_key for r in failed} ^ {f"key-{k}" for k in range(KEYS)}
    delivered = [r.data for call in Slow.calls for r in call if r.partition_key in spared]
    assert spared, "the failing call did not hold every key"
    assert len(delivered) == len(set(delivered)), "the other calls' records delivered once"
    shard, lease = next(iter(operator.coordinator.leases.items()))
    assert lease.checkpoint is not None
    assert lease.owner is None, "released on drain, with its position"
    last = client.get_records(
        ShardIterator=client.get_shard_iterator(
            StreamName=stream_name,
            ShardId=shard,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=lease.checkpoint,
        )["ShardIterator"]
    )["Records"]
    assert len(last) == 1, "the checkpoint is the last record: the aggregate, whole"
