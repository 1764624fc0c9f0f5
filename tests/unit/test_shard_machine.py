"""The worker's per-shard state machine, driven without threads (KCL lifecycle order,
retries that never skip, hand-off, loss, self-fencing, checkpoints that wait for the
operator), and once through the real threaded runtime against a real LeaseCoordinator."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import pytest

from streamconsumer.core.lineage import Shard
from streamconsumer.models import (
    Assignment,
    StartPosition,
    StartPositionType,
)
from streamconsumer.processor import (
    SHARD_END,
    BaseRecordProcessor,
    Checkpointer,
    ProcessorFactory,
    Record,
)
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.runtime import Worker
from streamconsumer.worker.shard import Answer, Outcome, ShardMachine, Stop, Wait
from testbed.in_process import InProcessOperator
from testbed.specs import worker_config

from .shard_drive import Drive, batch


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

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.events.append("shutdown_requested")
        checkpointer.checkpoint()

    def lease_lost(self) -> None:
        self.events.append("lease_lost")


@pytest.fixture
def events() -> list[str]:
    return []


def test_lifecycle_in_kcl_order_to_shard_end(events: list[str]) -> None:
    drive = Drive(Journal(events))
    for result in (batch(1, 2), batch(3), batch(4, end=True)):
        drive.machine.read(result)
    drive.run(until=5)
    assert events == ["initialize", "process 1,2", "process 3", "process 4", "shard_ended"]
    assert drive.stored() == ["2", "3", "4", SHARD_END]
    assert drive.machine.outcome is Outcome.ENDED
    assert drive.machine.held(0.0).sequence_number == "4"


def test_failures_retry_the_same_batch_and_skip_nothing(events: list[str]) -> None:
    drive = Drive(Journal(events, failures=2))
    drive.machine.read(batch(1))
    drive.machine.read(batch(2, end=True))
    drive.run(until=30)
    assert events == ["initialize", "raise", "raise", "process 1", "process 2", "shard_ended"]
    assert drive.stored() == ["1", "2", SHARD_END]


def test_handoff_finishes_the_batch_checkpoints_and_releases_with_the_position(
    events: list[str],
) -> None:
    drive = Drive(Journal(events))
    drive.machine.read(batch(1))
    drive.run(until=1)
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=2)
    assert events[-1] == "shutdown_requested"
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "1"
    assert drive.machine.outcome is Outcome.RELEASED


def test_a_release_is_repeated_until_the_status_holds_it(events: list[str]) -> None:
    answers = iter([Answer.ACCEPTED, Answer.UNREACHABLE, Answer.ACCEPTED, Answer.SAVED])
    drive = Drive(Journal(events), answer=lambda _: next(answers))
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=5)
    assert [r.release for r in drive.sent] == [True] * 4
    assert drive.machine.outcome is Outcome.RELEASED


def test_lost_lease_stops_without_checkpoint(events: list[str]) -> None:
    drive = Drive(Journal(events))
    drive.run(until=1)
    drive.machine.read(batch(1))
    drive.machine.revoke(Stop.LOST)
    drive.run(until=2)
    assert events == ["initialize", "lease_lost"]
    assert drive.sent == []
    assert drive.machine.outcome is Outcome.LOST


def test_a_refused_checkpoint_is_a_lost_lease(events: list[str]) -> None:
    drive = Drive(Journal(events), answer=lambda _: Answer.LOST)
    drive.machine.read(batch(1))
    drive.machine.read(batch(2))
    drive.run(until=1)
    assert events == ["initialize", "process 1", "lease_lost"]


def test_a_fenced_shard_delivers_nothing_until_renewed(events: list[str]) -> None:
    drive = Drive(Journal(events), fence=0.0)  # never renewed: closed
    drive.machine.read(batch(1, end=True))
    drive.run(until=1)
    assert events == [], "nothing delivered while fenced"
    drive.machine.renew(100.0)
    drive.run(until=2)
    assert events == ["initialize", "process 1", "shard_ended"]


def test_an_unreachable_operator_pauses_the_shard(events: list[str]) -> None:
    reachable = False
    drive = Drive(
        Journal(events), answer=lambda _: Answer.SAVED if reachable else Answer.UNREACHABLE
    )
    drive.machine.read(batch(1))
    drive.machine.read(batch(2))
    drive.run(until=3)
    assert events == ["initialize", "process 1"], "batch 2 waits for checkpoint 1"
    reachable = True
    drive.run(until=6)
    assert events == ["initialize", "process 1", "process 2"]


def test_empty_reads_reach_only_processors_that_ask_for_them(events: list[str]) -> None:
    for wants, expected in ((True, ["process 1", "process ", "process 2"]), (False, None)):
        events.clear()
        drive = Drive(Journal(events), wants_empty_batches=wants)
        for result in (batch(1), batch(), batch(2, end=True)):
            drive.machine.read(result)
        drive.run(until=5)
        delivered = [e for e in events if e.startswith("process")]
        assert delivered == (expected or ["process 1", "process 2"])


def test_reading_stops_at_prefetch_and_at_shard_end() -> None:
    drive = Drive(Journal([]))
    for _ in range(10):
        assert drive.machine.wants_read()
        drive.machine.read(batch())
    assert not drive.machine.wants_read(), "prefetch is full"
    drive = Drive(Journal([]))
    drive.machine.read(batch(1, end=True))
    assert not drive.machine.wants_read()
    drive.machine.revoke(Stop.HANDOFF)
    assert drive.machine.next(0.0) != Wait()


# --- the threaded runtime, against a real LeaseCoordinator in-process ----------------------------


class ListSource:
    """Two shards: a closed parent with records 1..3 and its open child with 4..5."""

    def __init__(self) -> None:
        self.records = {"parent": [1, 2, 3], "child": [4, 5]}

    def list_shards(self) -> list[Shard]:
        return [Shard("parent", closed=True), Shard("child", ("parent",))]

    def open_reader(self, shard_id: str, start: StartPosition) -> ListReader:
        after = int(start.sequence_number) if start.sequence_number else 0
        return ListReader(self.records[shard_id], after, closed=shard_id == "parent")

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        return None


class ListReader:
    def __init__(self, sequences: list[int], after: int, closed: bool) -> None:
        self.pending = [s for s in sequences if s > after]
        self.closed = closed

    def read(self) -> ReadResult:
        out, self.pending = self.pending[:2], self.pending[2:]
        return batch(*out, end=self.closed and not self.pending)


class Recorder(BaseRecordProcessor):
    seen: ClassVar[list[tuple[str, str]]] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        Recorder.seen += [(self.shard.shard_id, r.sequence_number) for r in records]
        checkpointer.checkpoint()


def run_threaded(
    factory: ProcessorFactory, done: Callable[[InProcessOperator], bool], **settings: Any
) -> InProcessOperator:
    """The threaded runtime on ListSource until `done`, then drained."""
    source = ListSource()
    operator = InProcessOperator(source.list_shards())
    config = worker_config(idle_between_reads_ms=10, drain_seconds=10, **settings)
    worker = Worker(config, operator, source, factory)  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run)
    runner.start()
    deadline = time.monotonic() + 20
    while not done(operator) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.drain()
    runner.join(15)
    assert not runner.is_alive(), "the worker did not drain"
    return operator


def test_the_threaded_runtime_reads_parents_first_and_drains_on_request() -> None:
    Recorder.seen = []
    operator = run_threaded(Recorder, lambda _: len(Recorder.seen) >= 5)
    assert Recorder.seen == [
        ("parent", "1"),
        ("parent", "2"),
        ("parent", "3"),
        ("child", "4"),
        ("child", "5"),
    ]
    leases = operator.coordinator.leases
    assert leases["child"].owner is None, "released on drain"
    assert leases["child"].checkpoint == "5", "with its position"
    assert "parent" in operator.coordinator.finished or leases["parent"].checkpoint == SHARD_END
    assert "w" not in operator.coordinator.workers, "gone from the status once it left"


# --- a SHARD_END the operator does not take (issue 22.12) ----------------------------------


def test_a_shard_end_waiting_for_the_listing_is_sent_again(events: list[str]) -> None:
    """503 (no listing since the operator started): the same SHARD_END, until taken."""
    answers = [Answer.UNREACHABLE, Answer.UNREACHABLE]
    drive = Drive(
        Journal(events),
        answer=lambda r: (
            answers.pop(0) if r.sequence_number == SHARD_END and answers else Answer.SAVED
        ),
    )
    drive.machine.read(batch(1, 2, end=True))
    drive.run(until=10)
    assert drive.stored() == ["2", SHARD_END, SHARD_END, SHARD_END]
    assert drive.machine.outcome is Outcome.ENDED


def test_a_refused_shard_end_hands_the_shard_back_at_the_last_record_done(
    events: list[str],
) -> None:
    """400 (the listing shows the shard open): the shard is released where processing
    stands, so the next owner reads on from there; nothing is skipped or replayed."""
    drive = Drive(
        Journal(events),
        answer=lambda r: Answer.INVALID if r.sequence_number == SHARD_END else Answer.SAVED,
    )
    drive.machine.read(batch(1, 2, end=True))
    drive.run(until=10)
    assert drive.stored() == ["2", SHARD_END, "2"]
    assert drive.sent[-1].release
    assert drive.machine.outcome is Outcome.RELEASED
    assert drive.machine.last_request() == drive.sent[-1], "said again if asked again"


def test_a_hand_off_does_not_wait_on_a_shard_end_the_operator_cannot_confirm_yet(
    events: list[str],
) -> None:
    """Found by the soak: a draining worker's SHARD_END was deferred (503) while the
    operator's listing was slow, and the drain overran the pod's grace period. During a
    hand-off the shard is released at the last record done instead."""
    drive = Drive(
        Journal(events),
        answer=lambda r: Answer.UNREACHABLE if r.sequence_number == SHARD_END else Answer.SAVED,
    )
    drive.machine.read(batch(1, 2, end=True))
    drive.run(until=0.05)
    assert drive.sent[-1].sequence_number == SHARD_END
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=10)
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "2"
    assert drive.machine.outcome is Outcome.RELEASED


def test_reads_keep_to_the_shards_budget() -> None:
    machine = ShardMachine(
        "w",
        Assignment(shard_id="s", epoch=1, start=StartPosition(type=StartPositionType.LATEST)),
        fence_deadline=1e9,
        prefetch=3,
        read_interval=0.5,  # reading.maxReadsPerSecond: 2
    )
    assert machine.read_allowed_at() <= 0.0, "the first read at once"
    machine.reading(10.0)
    assert machine.read_allowed_at() == 10.5
    machine.read(batch(1))
    assert machine.wants_read(), "room in the buffer: the budget alone says when"


def idle_worker() -> tuple[Worker, InProcessOperator]:
    """A threaded worker on ListSource, not yet running."""
    Recorder.seen = []
    source = ListSource()
    operator = InProcessOperator(source.list_shards())
    worker = Worker(worker_config(drain_seconds=10), operator, source, Recorder)  # type: ignore[arg-type]
    return worker, operator


def drains_after_a_sigterm_under(worker: Worker, held: AbstractContextManager[Any]) -> None:
    """The handler runs while `held` is held, as the main thread would hold it where the
    handler lands: it must return, and run() must then drain from the moment noted."""
    handled = threading.Event()

    def handler() -> None:
        with held:
            worker.drain()
        handled.set()

    threading.Thread(target=handler, daemon=True).start()
    assert handled.wait(5), "the handler waited for a lock its own thread holds"
    runner = threading.Thread(target=worker.run)
    runner.start()
    runner.join(15)
    assert not runner.is_alive(), "the worker did not drain from the moment noted"


def test_a_sigterm_while_the_main_thread_holds_the_workers_lock_still_drains() -> None:
    """The SIGTERM handler runs between two bytecodes of the main thread, which may then
    hold the worker's lock (run() and the heartbeat take it); before, the handler took
    it too and the worker hung for ever."""
    worker, _ = idle_worker()
    drains_after_a_sigterm_under(worker, worker._lock)


def test_a_sigterm_while_a_granting_heartbeat_is_out_starts_nothing() -> None:
    """The handler runs on the main thread inside the heartbeat's HTTP call; the answer
    grants a shard. Draining takes nothing new: the grant is released, not started."""
    worker, operator = idle_worker()
    heartbeat = operator.heartbeat
    signalled: list[bool] = []

    def sigterm_while_out(request: Any, timeout: float | None = None) -> Any:
        response = heartbeat(request, timeout)
        if response.assignments and not signalled:
            worker.drain()  # what the SIGTERM handler calls
            signalled.append(True)
        return response

    operator.heartbeat = sigterm_while_out  # type: ignore[method-assign]
    runner = threading.Thread(target=worker.run)
    runner.start()
    runner.join(15)
    assert not runner.is_alive(), "the worker did not drain"
    assert signalled, "no heartbeat granted a shard"
    assert Recorder.seen == []


def test_a_sigterm_while_the_main_thread_is_inside_the_wake_events_lock_still_drains() -> None:
    """run()'s wait and clear of its wake-up Event hold the Event's own lock for a few
    bytecodes; a handler that set the Event there hung the worker (or, signalled again,
    nested until a RecursionError)."""
    worker, _ = idle_worker()
    drains_after_a_sigterm_under(worker, worker._wake._cond)  # type: ignore[attr-defined]
