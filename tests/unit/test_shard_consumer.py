"""The worker's per-shard loop with its boundaries faked (stream and operator): KCL
lifecycle order, retries that never skip, hand-off, loss and self-fencing."""

from __future__ import annotations

import threading
import time

import pytest

from streamconsumer.core.lineage import Shard
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    CheckpointResponse,
    StartPosition,
    StartPositionType,
)
from streamconsumer.processor import SHARD_END, BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.fence import Fence
from streamconsumer.worker.shard import ShardConsumer, Stop


def batch(*sequences: int, end: bool = False) -> ReadResult:
    records = [Record(b"d", "k", str(s), checkpoint_sequence=str(s)) for s in sequences]
    return ReadResult(records, millis_behind_latest=0, shard_end=end)


class FakeReader:
    def __init__(self, results: list[ReadResult]) -> None:
        self.shard_id = "s"
        self._results = iter(results)

    def read(self) -> ReadResult:
        return next(self._results, ReadResult([], 0))


class FakeSource:
    def __init__(self, results: list[ReadResult]) -> None:
        self.results = results

    def list_shards(self) -> list[Shard]:
        return []

    def open_reader(self, shard_id: str, start: StartPosition) -> FakeReader:
        return FakeReader(self.results)


class FakeOperator:
    def __init__(self) -> None:
        self.calls: list[CheckpointRequest] = []

    def checkpoint(self, request: CheckpointRequest) -> CheckpointResponse:
        self.calls.append(request)
        return CheckpointResponse(
            shard_id=request.shard_id,
            epoch=request.epoch,
            checkpoint=request.sequence_number,
            persisted=False,
        )


class Journal(BaseRecordProcessor):
    def __init__(self, events: list[str], failures: int = 0) -> None:
        self.events = events
        self.failures = failures

    def initialize(self, shard: object) -> None:
        self.events.append("initialize")

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if self.failures:
            self.failures -= 1
            self.events.append("raise")
            raise RuntimeError("sink down")
        self.events.append("process " + ",".join(r.sequence_number for r in records))
        checkpointer.checkpoint()

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.events.append("shard_ended")
        checkpointer.checkpoint()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.events.append("shutdown_requested")
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        self.events.append("lease_lost")


def run(
    results: list[ReadResult], processor: Journal, fence: Fence | None = None
) -> tuple[ShardConsumer, FakeOperator, threading.Event]:
    if fence is None:
        fence = Fence()
        fence.renew(time.monotonic(), 3600)
    operator = FakeOperator()
    done = threading.Event()
    assignment = Assignment(
        shard_id="s", epoch=1, start=StartPosition(type=StartPositionType.TRIM_HORIZON)
    )
    consumer = ShardConsumer(
        "w",
        assignment,
        FakeSource(results),
        operator,
        lambda: processor,
        fence,
        prefetch=2,
        idle_seconds=0.01,
        on_done=lambda _: done.set(),
    )
    consumer.start()
    return consumer, operator, done


@pytest.fixture
def events() -> list[str]:
    return []


def test_lifecycle_in_kcl_order_to_shard_end(events: list[str]) -> None:
    consumer, operator, done = run([batch(1, 2), batch(3), batch(4, end=True)], Journal(events))
    assert done.wait(5)
    assert events == ["initialize", "process 1,2", "process 3", "process 4", "shard_ended"]
    assert [c.sequence_number for c in operator.calls] == ["2", "3", "4", SHARD_END]
    assert consumer.last_processed == "4"


def test_failures_retry_the_same_batch_and_skip_nothing(events: list[str]) -> None:
    _, operator, done = run([batch(1), batch(2, end=True)], Journal(events, failures=2))
    assert done.wait(10)
    assert events == ["initialize", "raise", "raise", "process 1", "process 2", "shard_ended"]
    assert [c.sequence_number for c in operator.calls] == ["1", "2", SHARD_END]


def test_handoff_checkpoints_and_releases(events: list[str]) -> None:
    consumer, operator, done = run([batch(1)], Journal(events))
    deadline = time.monotonic() + 5
    while "process 1" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    consumer.request_stop(Stop.HANDOFF)
    assert done.wait(5)
    assert events[-1] == "shutdown_requested"
    assert operator.calls[-1].release
    assert operator.calls[-1].sequence_number is None


def test_lost_lease_stops_without_checkpoint(events: list[str]) -> None:
    consumer, operator, done = run([], Journal(events))
    consumer.request_stop(Stop.LOST)
    assert done.wait(5)
    assert events == ["initialize", "lease_lost"]
    assert operator.calls == []


def test_a_fenced_worker_delivers_nothing_until_renewed(events: list[str]) -> None:
    fence = Fence()  # never renewed: closed
    _consumer, _, done = run([batch(1, end=True)], Journal(events), fence=fence)
    time.sleep(0.5)
    assert events == ["initialize"], "nothing delivered while fenced"
    fence.renew(time.monotonic(), 60)
    assert done.wait(5)
    assert events == ["initialize", "process 1", "shard_ended"]


def test_empty_reads_reach_only_processors_that_ask_for_them(events: list[str]) -> None:
    class Timed(Journal):
        wants_empty_batches = True

    _, _, done = run([batch(1), batch(), batch(2, end=True)], Timed(events))
    assert done.wait(5)
    assert events == ["initialize", "process 1", "process ", "process 2", "shard_ended"]
    events.clear()
    _, _, done = run([batch(1), batch(), batch(2, end=True)], Journal(events))
    assert done.wait(5)
    assert events == ["initialize", "process 1", "process 2", "shard_ended"]
