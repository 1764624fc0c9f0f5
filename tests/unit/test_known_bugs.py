"""Issue 11's bugs, each written as a failing case against the code as it was, before
any fix. They are strict xfails: the fix that makes one pass must remove its marker
(and usually move it next to the tests of the module it fixes)."""

from __future__ import annotations

import threading
import time

import pytest

from streamconsumer.controller.state import Coordinator
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    CheckpointResponse,
    HeartbeatRequest,
    HeldShard,
    StartPosition,
    StartPositionType,
)
from streamconsumer.models.resource import StreamConsumerSpec
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.worker.fence import Fence
from streamconsumer.worker.shard import ShardConsumer, Stop


def spec(lease_seconds: float = 10) -> StreamConsumerSpec:
    return StreamConsumerSpec.model_validate(
        {
            "source": {"kinesis": {"streamName": "s"}},
            "processor": {"image": "i", "entrypoint": "m:f"},
            "leases": {"durationSeconds": lease_seconds},
        }
    )


def beat(coordinator: Coordinator, worker: str, now: float, *held: tuple[str, int]):  # type: ignore[no-untyped-def]
    request = HeartbeatRequest(
        worker=worker, held=[HeldShard(shard_id=s, epoch=e) for s, e in held]
    )
    return coordinator.heartbeat(request, now)


def finish(coordinator: Coordinator, shard_id: str) -> None:
    lease = coordinator.leases[shard_id]
    assert lease.owner is not None
    coordinator.checkpoint(
        CheckpointRequest(
            worker=lease.owner, shard_id=shard_id, epoch=lease.epoch, sequence_number=SHARD_END
        )
    )


@pytest.mark.xfail(strict=True, reason="issue 11.1: lineage forgets a finished grandparent")
def test_split_then_merge_back_never_restarts_the_original_shard() -> None:
    coordinator = Coordinator(spec(), {}, now=0.0)
    coordinator.set_shards([Shard("p", closed=True)])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    finish(coordinator, "p")
    split = [
        Shard("p", closed=True),
        Shard("c1", ("p",), closed=True),
        Shard("c2", ("p",), closed=True),
        Shard("m", ("c1", "c2")),
    ]
    coordinator.set_shards(split)
    coordinator.step(1.0)  # c1, c2 granted; p collected once they started
    finish(coordinator, "c1")
    finish(coordinator, "c2")
    coordinator.step(2.0)  # m granted; c1, c2 collected
    coordinator.step(3.0)
    assert "p" not in coordinator.leases, "the finished original shard was granted again"


@pytest.mark.xfail(strict=True, reason="issue 11.5: grants are visible before they are saved")
def test_a_grant_reaches_no_worker_before_the_status_holds_it() -> None:
    coordinator = Coordinator(spec(), {}, now=0.0)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    assert coordinator.persisted_version < coordinator.version
    assert beat(coordinator, "a", 0.1).assignments == []


@pytest.mark.xfail(strict=True, reason="issue 11.8: a shorter lease expires longer fences")
def test_lowering_the_lease_duration_waits_out_fences_already_promised() -> None:
    coordinator = Coordinator(spec(lease_seconds=10), {}, now=0.0)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    epoch = coordinator.leases["s0"].epoch
    beat(coordinator, "a", 1.0, ("s0", epoch))  # a's fence now runs to 1.0 + 10 s
    coordinator.spec = spec(lease_seconds=2)
    coordinator.step(5.0)
    assert coordinator.leases["s0"].owner == "a", "expired while its fence is still open"


@pytest.mark.xfail(strict=True, reason="issue 11.12: a shard gone from the stream keeps its lease")
def test_a_shard_that_left_the_stream_unfinished_loses_its_lease() -> None:
    coordinator = Coordinator(spec(), {}, now=0.0)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    coordinator.set_shards([Shard("s1")])  # s0 trimmed by retention
    coordinator.step(1.0)
    assert "s0" not in coordinator.leases


# --- the worker's per-shard loop (threads), boundaries faked -------------------------


def batch(*sequences: int) -> ReadResult:
    records = [Record(b"d", "k", str(s), checkpoint_sequence=str(s)) for s in sequences]
    return ReadResult(records, millis_behind_latest=0)


class Reader:
    def __init__(self, results: list[ReadResult]) -> None:
        self.shard_id = "s"
        self._results = iter(results)

    def read(self) -> ReadResult:
        return next(self._results, ReadResult([], 0))


class Source:
    def __init__(self, results: list[ReadResult]) -> None:
        self.results = results

    def list_shards(self) -> list[Shard]:
        return []

    def open_reader(self, shard_id: str, start: StartPosition) -> Reader:
        return Reader(self.results)


class Operator:
    def __init__(self) -> None:
        self.calls: list[CheckpointRequest] = []

    def checkpoint(self, request: CheckpointRequest) -> CheckpointResponse:
        self.calls.append(request)
        return CheckpointResponse(
            shard_id=request.shard_id,
            epoch=request.epoch,
            checkpoint=request.sequence_number,
            persisted=True,
        )


def consume(
    results: list[ReadResult], processor: BaseRecordProcessor, fence: Fence
) -> tuple[ShardConsumer, Operator, threading.Event]:
    operator, done = Operator(), threading.Event()
    consumer = ShardConsumer(
        "w",
        Assignment(shard_id="s", epoch=1, start=StartPosition(type=StartPositionType.TRIM_HORIZON)),
        Source(results),
        operator,
        lambda: processor,
        fence,
        prefetch=2,
        idle_seconds=0.01,
        on_done=lambda _: done.set(),
    )
    consumer.start()
    return consumer, operator, done


class FailsOnTwo(BaseRecordProcessor):
    """Processes record 1; record 2's batch keeps raising (a sink that is down)."""

    def __init__(self) -> None:
        self.processed: list[str] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if records[0].sequence_number == "2":
            raise OSError("sink down")
        self.processed += [r.sequence_number for r in records]
        checkpointer.checkpoint()


@pytest.mark.xfail(strict=True, reason="issue 11.2: a hand-off checkpoints a skipped batch")
def test_handoff_after_an_outage_checkpoints_only_processed_records() -> None:
    fence = Fence()
    fence.renew(time.monotonic(), 0.5)  # the operator goes away while batch 2 is retried
    processor = FailsOnTwo()
    consumer, operator, done = consume([batch(1), batch(2)], processor, fence)
    time.sleep(1.0)
    consumer.request_stop(Stop.HANDOFF)  # the operator is back and moves the shard
    assert done.wait(5)
    assert processor.processed == ["1"]
    stored = [c.sequence_number for c in operator.calls if c.sequence_number]
    assert stored == ["1"], f"checkpointed {stored}: record 2 was never processed"


@pytest.mark.xfail(strict=True, reason="issue 11.7: a release carries no position")
def test_a_handoff_release_carries_the_position() -> None:
    fence = Fence()
    fence.renew(time.monotonic(), 3600)

    class Lazy(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            pass  # checkpoints only on shutdown

    consumer, operator, done = consume([batch(1, 2)], Lazy(), fence)
    time.sleep(0.3)
    consumer.request_stop(Stop.HANDOFF)
    assert done.wait(5)
    release = operator.calls[-1]
    assert release.release
    assert release.sequence_number == "2", "a restarted operator would replay 1..2"


@pytest.mark.xfail(strict=True, reason="issue 11.10: a hand-off cannot interrupt retries")
def test_a_handoff_interrupts_a_poison_batch() -> None:
    fence = Fence()
    fence.renew(time.monotonic(), 3600)

    class Poison(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            raise ValueError("poison record")

    consumer, operator, done = consume([batch(1)], Poison(), fence)
    time.sleep(0.3)
    consumer.request_stop(Stop.HANDOFF)
    assert done.wait(3), "still retrying the poison batch after the hand-off"
    assert all(c.sequence_number is None for c in operator.calls), "nothing was processed"


# --- Spark/bronze batching ------------------------------------------------------------


class FlakySink(BatchingProcessor):
    def __init__(self) -> None:
        super().__init__(stream="s", max_records=2, max_wait=60)
        self.failures = 1
        self.committed: list[str] = []

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("storage unavailable")
        self.committed += [r.sequence_number for r in records]


@pytest.mark.xfail(strict=True, reason="issue 11.3: a retried commit doubles the batch")
def test_a_retried_sink_commit_writes_each_record_once() -> None:
    processor = FlakySink()
    from streamconsumer.processor import ShardInfo

    processor.initialize(ShardInfo("s", None))
    stored: list[str] = []
    checkpointer = Checkpointer("s", stored.append)
    records = batch(1, 2).records
    checkpointer._delivering(records)
    with pytest.raises(OSError, match="storage unavailable"):
        processor.process_records(records, checkpointer)
    processor.process_records(records, checkpointer)  # the worker retries the same batch
    assert processor.committed == ["1", "2"]


# --- the operator's API and loop --------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 11.13: a TokenReview error answers 500")
def test_a_failing_token_review_answers_503_not_500() -> None:
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from streamconsumer.controller.api import WorkerApi
    from streamconsumer.controller.registry import Registry

    class Down:
        async def review(self, token: str) -> None:
            raise ConnectionError("apiserver unreachable")

    async def call() -> int:
        api = WorkerApi(Registry(), Down(), time.monotonic)
        async with TestClient(TestServer(api.app())) as client:
            response = await client.post(
                "/v1/namespaces/n/streamconsumers/c/heartbeat",
                json={"worker": "w"},
                headers={"Authorization": "Bearer t"},
            )
            return response.status

    assert asyncio.run(call()) == 503


@pytest.mark.xfail(strict=True, reason="issue 11.6: a status-write error kills the loop")
def test_a_failing_status_write_does_not_stop_the_loop() -> None:
    import asyncio

    from kubernetes.client.exceptions import ApiException

    from streamconsumer.controller.config import OperatorConfig
    from streamconsumer.controller.loop import run_consumer
    from streamconsumer.controller.registry import ManagedConsumer

    class Listing:
        def list_shards(self) -> list[Shard]:
            return [Shard("s0")]

    class Failing:
        attempts = 0

        def write(self, status: object) -> None:
            Failing.attempts += 1
            raise ApiException(status=500, reason="etcd leader changed")

    async def run() -> None:
        consumer = ManagedConsumer("n", "c", Coordinator(spec(), {}, now=time.monotonic()))
        consumer.coordinator.version = 1
        loops = 0

        def stopped() -> bool:
            nonlocal loops
            loops += 1
            return loops > 20

        await run_consumer(
            consumer,
            Listing(),  # type: ignore[arg-type]
            Failing(),  # type: ignore[arg-type]
            OperatorConfig(status_interval_seconds=0.01),
            generation=lambda: 1,
            emit=lambda *_: None,
            stopped=stopped,
        )

    asyncio.run(run())  # returns once stopped, having retried
    assert Failing.attempts > 1
