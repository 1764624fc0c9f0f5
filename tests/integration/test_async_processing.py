"""An async processor through the real threaded worker runtime on the Kinesis emulator
(its leases from an in-process LeaseCoordinator), loaded from its entrypoint as the
worker's process loads it: every call on the process's one event loop, the calls of a
shard's groups (processor.parallelism) at once on it, each key's records in order, a
failing call retried, and the drain's shutdown_requested awaited before the release."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

import pytest

from streamconsumer import awaiting
from streamconsumer.loading import load_processor
from streamconsumer.processor import Checkpointer, Record
from testbed.in_process import BRISK, drain_stream, emulator_worker
from testbed.kinesis import KinesisEmulator, put_records

pytestmark = pytest.mark.usefixtures("credentials")  # the worker's boto3 clients
KEYS = 5
ROUNDS = 12


class AsyncSlow(awaiting.AsyncBaseRecordProcessor):
    """An awaited "API call" of 5 ms a record; the first call holding key-2's sixth
    record raises. Runs on the loop's one thread: its counters need no lock."""

    done: ClassVar[list[tuple[str, bytes]]] = []
    threads: ClassVar[set[str]] = set()
    shutdowns: ClassVar[list[str]] = []
    in_flight = most_in_flight = 0
    failed = False

    async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        cls = type(self)
        cls.threads.add(threading.current_thread().name)
        if b"key-2 5" in [r.data for r in records] and not cls.failed:
            cls.failed = True
            raise RuntimeError("the API said no, once")
        cls.in_flight += 1
        cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            for record in records:
                await asyncio.sleep(0.005)
                cls.done.append((record.partition_key, record.data))
        finally:
            cls.in_flight -= 1

    async def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        await asyncio.sleep(0.01)
        type(self).shutdowns.append(self.shard.shard_id)
        checkpointer.checkpoint()


def test_an_async_processor_runs_on_one_loop_with_the_workers_guarantees(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=2)
    put_records(
        client,
        stream_name,
        [(f"key-{k}", b"key-%d %d" % (k, n)) for n in range(ROUNDS) for k in range(KEYS)],
    )
    total = KEYS * ROUNDS
    config = emulator_worker(kinesis, stream_name, parallelism=3, max_records=25, **BRISK)
    factory = load_processor(f"{__name__}:AsyncSlow")
    operator = drain_stream(config, factory, lambda: len(AsyncSlow.done) >= total)

    assert len(AsyncSlow.done) == total, "every record once"
    for k in range(KEYS):
        mine = [d for key, d in AsyncSlow.done if key == f"key-{k}"]
        assert mine == [b"key-%d %d" % (k, n) for n in range(ROUNDS)], f"key-{k} in order"
    assert AsyncSlow.failed, "the failing call happened, and was retried"
    assert AsyncSlow.threads == {awaiting.LOOP_THREAD_NAME}
    assert AsyncSlow.most_in_flight > 1, "calls ran at once on the loop"
    assert sorted(AsyncSlow.shutdowns) == sorted(operator.coordinator.leases)
    for lease in operator.coordinator.leases.values():
        assert lease.owner is None, "released on drain"
        assert lease.checkpoint is not None, "with its position"
