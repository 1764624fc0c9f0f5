"""Async processors: lifecycle methods written `async def` (or an `async def` function)
run on one event loop per worker process, in a thread of its own, so the shards' calls
share one loop and what lives on it (a client session, a connection pool).

The worker does not change for them: each call waits for its coroutine on that loop,
so the failure policy, the timeout watchdog, hand-offs and parallelism treat an async
call as any other (docs/parallelism.md#async-processors). Standard library only: this is
part of the processor SDK."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

# The loop is the event_loop module's; its names stay importable here, the SDK's face.
from streamconsumer.event_loop import LOOP_THREAD_NAME as LOOP_THREAD_NAME
from streamconsumer.event_loop import TICK_SECONDS as TICK_SECONDS
from streamconsumer.event_loop import EventLoopThread as EventLoopThread
from streamconsumer.event_loop import ProcessorCancelled as ProcessorCancelled
from streamconsumer.event_loop import process_loop as process_loop
from streamconsumer.processor import (
    LIFECYCLE,
    Checkpointer,
    CheckpointError,
    ProcessResult,
    Record,
    RecordProcessor,
    ShardInfo,
    checkpoint_what_returned,
)

T = TypeVar("T")
Runner = Callable[[Awaitable[Any]], Any]  # waits for an awaitable, returns its result


def is_async(target: object) -> bool:
    """Whether `target` (a processor class or instance, or a function) has an `async def`
    lifecycle method (or `warm_up`), or is an `async def` function."""
    if inspect.iscoroutinefunction(target):
        return True
    if inspect.isfunction(target):
        return False
    return any(
        inspect.iscoroutinefunction(getattr(target, name, None)) for name in (*LIFECYCLE, "warm_up")
    )


class CallCheckpointer(Checkpointer):
    """The checkpointer an async call gets: the worker's own, until the call returns.
    A task the call leaves running on the loop may not checkpoint after that: the worker
    stores what a call asked for when it returns, and a later request would race the
    next call's (and may name records the task has not finished)."""

    def __init__(self, inner: Checkpointer) -> None:  # (the inner one keeps the progress)
        self._inner = inner
        self.shard_id = inner.shard_id
        self.open = True

    @property
    def last_checkpoint(self) -> str | None:
        return self._inner.last_checkpoint

    def checkpoint(self, at: Record | str | None = None) -> None:
        if not self.open:
            raise CheckpointError(
                f"{self.shard_id}: checkpoint asked for after the call that got this "
                "checkpointer returned; checkpoint inside the call, before it returns"
            )
        self._inner.checkpoint(at)


class AwaitingProcessor:
    """A processor whose lifecycle methods may be coroutines, with the synchronous face
    the worker calls: each call that returns an awaitable waits for it on `run` (this
    process's event loop unless told otherwise: the simulation steps it itself)."""

    def __init__(self, processor: object, run: Runner | None = None) -> None:
        self.processor = processor
        self._run = run

    def __getattr__(self, name: str) -> Any:
        """The processor's own attributes (`wants_empty_batches`, a test's counters)."""
        if name == "processor":  # (not set yet: while unpickling, say)
            raise AttributeError(name)
        return getattr(self.processor, name)

    def warm_up(self) -> None:
        hook = getattr(self.processor, "warm_up", None)
        if callable(hook):
            self._wait(hook())

    def initialize(self, shard: ShardInfo) -> None:
        self._wait(self.processor.initialize(shard))  # type: ignore[attr-defined]

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        return self._with(checkpointer, lambda c: self.processor.process_records(records, c))  # type: ignore[attr-defined,no-any-return]

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self._with(checkpointer, lambda c: self.processor.shard_ended(c))  # type: ignore[attr-defined]

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self._with(checkpointer, lambda c: self.processor.shutdown_requested(c))  # type: ignore[attr-defined]

    def lease_lost(self) -> None:
        self._wait(self.processor.lease_lost())  # type: ignore[attr-defined]

    def _with(self, checkpointer: Checkpointer, call: Callable[[Checkpointer], object]) -> Any:
        own = CallCheckpointer(checkpointer)
        try:
            result = call(own)
            if inspect.isawaitable(result):
                # Closed on the loop as the coroutine ends, before the loop runs anything
                # else (a task it left), not when this thread wakes up later.
                result = _closing(result, own)
            return self._wait(result)
        finally:
            own.open = False

    def _wait(self, result: object) -> Any:
        if not inspect.isawaitable(result):
            return result
        run = self._run or process_loop().run
        return run(result)


async def _closing(awaitable: Awaitable[T], checkpointer: CallCheckpointer) -> T:
    try:
        return await awaitable
    finally:
        checkpointer.open = False


class AsyncRecordProcessor(Protocol):
    """The KCL-v2-shaped processor, async. Subclass `AsyncBaseRecordProcessor` for the
    defaults. A class may also mix async and plain methods."""

    async def initialize(self, shard: ShardInfo) -> None: ...
    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult: ...
    async def lease_lost(self) -> None: ...
    async def shard_ended(self, checkpointer: Checkpointer) -> None: ...
    async def shutdown_requested(self, checkpointer: Checkpointer) -> None: ...


class AsyncBaseRecordProcessor:
    """`BaseRecordProcessor`'s defaults, async: checkpoint at shard end and on shutdown;
    nothing on initialize or loss."""

    shard: ShardInfo

    async def initialize(self, shard: ShardInfo) -> None:
        self.shard = shard

    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult:
        raise NotImplementedError

    async def lease_lost(self) -> None:
        return None

    async def shard_ended(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()

    async def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()


class AsyncFunctionProcessor(AsyncBaseRecordProcessor):
    """The plain-function form for `async def handle(records)`: checkpointed when it
    returns, as `FunctionProcessor`."""

    def __init__(self, handle: Callable[[list[Record]], Awaitable[ProcessResult]]) -> None:
        self.handle = handle

    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult:
        result = await self.handle(list(records))  # its own copy: ours names what failed
        checkpoint_what_returned(records, result, checkpointer)
        return result


class AsyncFactory:
    """A processor factory for an async processor class: each instance behind an
    AwaitingProcessor. Keeps what the worker reads off a class factory."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.wants_empty_batches = bool(getattr(cls, "wants_empty_batches", False))

    def __call__(self) -> RecordProcessor:
        return AwaitingProcessor(self.cls())


def synchronous(processor: object) -> RecordProcessor:
    """An async processor instance, or an `async def` function, as the worker calls it."""
    if inspect.iscoroutinefunction(processor):
        return AwaitingProcessor(AsyncFunctionProcessor(processor))
    return AwaitingProcessor(processor)
