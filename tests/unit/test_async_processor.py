"""Async processors (issue 29): `async def` lifecycle methods and functions run on the
process's one event loop, in its own thread, behind the synchronous face the worker
calls (streamconsumer.awaiting)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from typing import Any, ClassVar

import pytest

from streamconsumer import awaiting, event_loop
from streamconsumer.loading import load_processor
from streamconsumer.processor import (
    BaseRecordProcessor,
    BatchResult,
    Checkpointer,
    CheckpointError,
    NotAwaitedError,
    ProcessorExited,
    Record,
    ShardInfo,
    warm_up,
)
from streamconsumer.testing import ProcessorHarness, make_records


class AsyncPages(awaiting.AsyncBaseRecordProcessor):
    """Every method async; notes the thread and loop each ran on."""

    seen: ClassVar[list[tuple[str, str, int]]] = []
    wants_empty_batches = True

    def note(self, method: str) -> None:
        loop = id(asyncio.get_running_loop())
        self.seen.append((method, threading.current_thread().name, loop))

    async def warm_up(self) -> None:
        self.note("warm_up")

    async def initialize(self, shard: ShardInfo) -> None:
        await asyncio.sleep(0)
        self.shard = shard
        self.note("initialize")

    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> BatchResult | None:
        await asyncio.sleep(0)
        self.note("process_records")
        data = [r.data for r in records]
        if b"bad" in data:
            first = data.index(b"bad")
            if first:
                checkpointer.checkpoint(records[first - 1])
            return BatchResult(failed=records[first:])
        checkpointer.checkpoint()
        return None

    async def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.note("shard_ended")
        checkpointer.checkpoint()

    async def lease_lost(self) -> None:
        self.note("lease_lost")


def entrypoint(monkeypatch: pytest.MonkeyPatch, **names: Any) -> str:
    module = types.ModuleType("async_entrypoints")
    for name, value in names.items():
        setattr(module, name, value)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__ + ":" + next(iter(names))


def test_an_async_class_from_its_entrypoint_runs_every_call_on_the_one_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    AsyncPages.seen.clear()
    factory = load_processor(entrypoint(monkeypatch, AsyncPages=AsyncPages))
    assert getattr(factory, "wants_empty_batches", False), "kept for the worker"
    warm_up(factory)
    harness = ProcessorHarness(factory())
    harness.initialize()
    records = make_records(b"a", b"b", b"bad", b"c")
    assert harness.process(records) == records[2:], "the partial response, read as ever"
    assert harness.checkpoints == ["2"]
    assert harness.process(records[3:]) == []
    harness.end_shard()
    harness.lose_lease()
    assert harness.checkpoints == ["2", "4", "SHARD_END"]
    methods = [method for method, _, _ in AsyncPages.seen]
    assert methods == [
        "warm_up",
        "initialize",
        "process_records",
        "process_records",
        "shard_ended",
        "lease_lost",
    ]
    assert {thread for _, thread, _ in AsyncPages.seen} == {awaiting.LOOP_THREAD_NAME}
    assert {loop for _, _, loop in AsyncPages.seen} == {id(awaiting.process_loop().loop)}


def test_an_async_function_is_checkpointed_when_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handled: list[bytes] = []

    async def handle(records: list[Record]) -> BatchResult | None:
        await asyncio.sleep(0)
        handled.extend(r.data for r in records)
        return BatchResult(failed=[records[-1]]) if records[-1].data == b"later" else None

    factory = load_processor(entrypoint(monkeypatch, handle=handle))
    harness = ProcessorHarness(factory())
    records = make_records(b"a", b"b", b"later")
    assert harness.process(records) == records[2:]
    assert harness.checkpoints == ["2"]
    # The harness wraps an async function as the worker does.
    direct = ProcessorHarness(handle)
    assert direct.process(records[:2]) == []
    assert direct.checkpoints == ["2"]
    assert handled == [b"a", b"b", b"later", b"a", b"b"]


def test_calls_of_several_shards_run_at_once_on_the_loop() -> None:
    """Two shards' calls wait for each other: they finish only if the loop runs them at
    once, as it would two I/O calls."""
    arrived = {name: asyncio.Event() for name in ("one", "two")}
    loop = awaiting.process_loop().loop

    class Meets(awaiting.AsyncBaseRecordProcessor):
        async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            mine, other = ("one", "two") if records[0].data == b"one" else ("two", "one")
            loop.call_soon(arrived[mine].set)
            await asyncio.wait_for(arrived[other].wait(), 10)

    outcomes: list[object] = []

    def shard(data: bytes) -> None:
        harness = ProcessorHarness(Meets(), shard_id=data.decode())
        outcomes.append(harness.process(make_records(data)))

    threads = [threading.Thread(target=shard, args=(data,)) for data in (b"one", b"two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert outcomes == [[], []]


def test_a_task_left_running_may_not_checkpoint_after_its_call_returned() -> None:
    late: list[BaseException | None] = []
    finished = threading.Event()

    class LeavesATask(awaiting.AsyncBaseRecordProcessor):
        async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            async def later() -> None:
                await asyncio.sleep(0.05)
                try:
                    checkpointer.checkpoint(records[-1])
                    late.append(None)
                except CheckpointError as error:
                    late.append(error)
                finished.set()

            self.task = asyncio.create_task(later())  # (held: a task may be collected)

    harness = ProcessorHarness(LeavesATask())
    harness.process(make_records(b"a", b"b"))
    assert finished.wait(10)
    assert isinstance(late[0], CheckpointError), late
    assert "after the call" in str(late[0])
    assert harness.checkpoints == []
    assert harness.progress.requested is None, "nothing asked for behind the worker's back"


def test_a_cancelled_coroutine_is_a_failed_call_that_the_failure_policy_retries() -> None:
    calls: list[int] = []

    async def handle(records: list[Record]) -> None:
        calls.append(len(records))
        if len(calls) == 1:
            raise asyncio.CancelledError()  # (a BaseException inside asyncio)

    harness = ProcessorHarness(handle, policy={"retries": 2, "initialBackoffSeconds": 0.01})
    records = make_records(b"a", b"b")
    delivery = harness.deliver(records)
    assert delivery.attempts[0].error is not None
    assert "ProcessorCancelled" in delivery.attempts[0].error
    assert delivery.done == records
    assert delivery.checkpoints == ["2"]


def test_a_hung_coroutine_is_reported_as_any_hung_call() -> None:
    release = threading.Event()

    async def handle(records: list[Record]) -> None:
        await asyncio.to_thread(release.wait)

    harness = ProcessorHarness(handle, policy={"timeoutSeconds": 1})
    try:
        delivery = harness.deliver(make_records(b"a"))
    finally:
        release.set()
    assert delivery.hung is not None
    assert delivery.done == []


def test_a_coroutine_raising_system_exit_fails_its_call_and_the_loop_goes_on() -> None:
    async def handle(records: list[Record]) -> None:
        if records[0].data == b"exit":
            raise SystemExit(1)  # it would end run_forever, and every shard's calls with it

    harness = ProcessorHarness(handle)
    with pytest.raises(ProcessorExited, match="SystemExit"):
        harness.process(make_records(b"exit"))
    assert harness.process(make_records(b"next")) == []
    assert harness.checkpoints == ["1"]


def test_a_processor_that_stops_the_loop_or_exits_it_from_a_task_leaves_it_running() -> None:
    """The loop serves every shard: a processor's `loop.stop()`, or SystemExit from a task
    it awaits (gather ends run_forever with it), fails at most its own call."""

    class Stops(awaiting.AsyncBaseRecordProcessor):
        async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            if records[0].data == b"stop":
                asyncio.get_running_loop().stop()
            if records[0].data == b"exit":

                async def task() -> None:
                    raise SystemExit(1)

                await asyncio.gather(task())
            checkpointer.checkpoint()

    harness = ProcessorHarness(Stops())
    assert harness.process(make_records(b"stop")) == []
    with pytest.raises(ProcessorExited, match="SystemExit"):
        harness.process(make_records(b"exit"))
    other = ProcessorHarness(Stops(), shard_id="another")
    assert other.process(make_records(b"fine")) == []
    assert other.checkpoints == ["1"]


def test_a_task_scheduled_as_the_call_returns_cannot_checkpoint_either() -> None:
    """The checkpointer closes on the loop as the coroutine ends, not when the shard's
    thread wakes up: a callback the loop runs right after is refused, every time."""
    outcomes: list[str] = []

    class Schedules(awaiting.AsyncBaseRecordProcessor):
        async def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            def late() -> None:
                try:
                    checkpointer.checkpoint(records[-1])
                    outcomes.append("accepted")
                except CheckpointError:
                    outcomes.append("refused")

            asyncio.get_running_loop().call_soon(late)

    for _ in range(50):
        ProcessorHarness(Schedules()).process(make_records(b"a"))
    deadline = threading.Event()
    while len(outcomes) < 50 and not deadline.wait(0.01):
        pass
    assert outcomes == ["refused"] * 50


class Decorated(BaseRecordProcessor):
    """A method the worker cannot tell is async: a plain decorator around `async def`."""

    @staticmethod
    def wrap(method: Any) -> Any:
        def plain(*args: Any) -> Any:
            return method(*args)

        return plain

    async def _process(self, records: list[Record], checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    async def _ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    process_records = wrap(_process)
    shard_ended = wrap(_ended)


def test_an_awaitable_nothing_awaits_fails_its_call_and_is_never_done() -> None:
    assert not awaiting.is_async(Decorated.process_records)
    harness = ProcessorHarness(Decorated())
    records = make_records(b"a", b"b")
    with pytest.raises(NotAwaitedError, match="process_records returned a coroutine"):
        harness.process(records)
    delivery = ProcessorHarness(Decorated(), policy={"retries": 1}).deliver(records)
    assert delivery.done == []
    assert delivery.checkpoints == []
    assert delivery.blocked is not None
    assert "NotAwaitedError" in delivery.blocked
    with pytest.raises(NotAwaitedError, match="shard_ended"):
        harness.end_shard()
    assert "SHARD_END" not in harness.checkpoints, "no flush, no SHARD_END"


def test_an_async_callable_object_or_a_wrapped_function_is_awaited() -> None:
    seen: list[bytes] = []

    class Handler:
        async def __call__(self, records: list[Record]) -> None:
            seen.extend(r.data for r in records)

    assert ProcessorHarness(Handler()).process(make_records(b"a")) == []
    assert ProcessorHarness(lambda records: Handler()(records)).process(make_records(b"b")) == []
    assert seen == [b"a", b"b"]


def test_an_async_processors_own_attributes_are_the_workers_to_read() -> None:
    harness = ProcessorHarness(AsyncPages())
    assert getattr(harness.processor, "wants_empty_batches", False)
    assert harness.processor.seen is AsyncPages.seen  # type: ignore[attr-defined]


def test_a_sync_processor_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    class Plain(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            checkpointer.checkpoint()

    assert load_processor(entrypoint(monkeypatch, Plain=Plain)) is Plain
    assert not awaiting.is_async(Plain)
    assert not awaiting.is_async(lambda records: None)
    assert awaiting.is_async(AsyncPages)


def test_a_coroutine_blocking_the_loop_is_said_once_in_the_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A blocked loop shows otherwise only as a call past timeoutSeconds, in a shard that
    may not be the one blocking it: the log says what blocks every shard's calls."""
    monkeypatch.setattr(event_loop, "BLOCKED_WARNING_SECONDS", 1.0)
    loop = awaiting.EventLoopThread(name="test-loop")

    async def blocking() -> str:
        time.sleep(2.5)  # noqa: ASYNC251 (a blocking client, as users write it by mistake)
        return "done"

    async def awaiting_well() -> str:
        await asyncio.sleep(0.1)
        return "done"

    with caplog.at_level("WARNING", logger="streamconsumer.event_loop"):
        assert loop.run(awaiting_well()) == "done"
        assert loop.run(blocking()) == "done"
        time.sleep(1.0)  # the loop runs again: nothing more is said
    said = [r.getMessage() for r in caplog.records if "blocks it" in r.getMessage()]
    assert len(said) == 1, said
    assert "has not run for" in said[0]
    assert "asyncio.to_thread" in said[0]
    # Running again: its tick is at most a scheduling delay late (under load, not 0).
    assert loop.blocked_for(time.monotonic()) < awaiting.TICK_SECONDS
