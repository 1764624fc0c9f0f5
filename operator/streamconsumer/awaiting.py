"""Async processors: lifecycle methods written `async def` (or an `async def` function)
run on one event loop per worker process, in a thread of its own, so the shards' calls
share one loop and what lives on it (a client session, a connection pool).

The worker does not change for them: each call waits for its coroutine on that loop,
so the failure policy, the timeout watchdog, hand-offs and parallelism treat an async
call as any other (docs/parallelism.md#async-processors). Standard library only: this is
part of the processor SDK."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from streamconsumer.processor import (
    LIFECYCLE,
    Checkpointer,
    CheckpointError,
    ProcessorExited,
    ProcessResult,
    Record,
    RecordProcessor,
    ShardInfo,
    checkpoint_what_returned,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Runner = Callable[[Awaitable[Any]], Any]  # waits for an awaitable, returns its result
LOOP_THREAD_NAME = "processor-loop"
TICK_SECONDS = 0.5
BLOCKED_WARNING_SECONDS = 5.0  # the loop not running this long is said in the log


class ProcessorCancelled(RuntimeError):
    """The processor's coroutine was cancelled (by itself, or by a task it shares the loop
    with): a failed call, retried as any other."""


class EventLoopThread:
    """An asyncio event loop running for ever in a daemon thread; `run` waits for a
    coroutine on it from any other thread."""

    def __init__(self, name: str = LOOP_THREAD_NAME) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_for_ever, name=name, daemon=True)
        self._last_tick = time.monotonic()
        self.loop.call_soon(self._tick)
        self._thread.start()
        watch = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        watch.start()

    def _tick(self) -> None:
        """On the loop, every TICK_SECONDS: proof that it runs."""
        self._last_tick = time.monotonic()
        self.loop.call_later(TICK_SECONDS, self._tick)

    def blocked_for(self, now: float) -> float:
        """How long the loop has not run past its tick: a coroutine blocking it."""
        return max(0.0, now - self._last_tick - TICK_SECONDS)

    def _watch(self) -> None:
        """Says once per blockage that a coroutine blocks the loop: every shard's async
        calls wait, and what shows otherwise is only a call past timeoutSeconds."""
        said = False
        while not self.loop.is_closed():
            time.sleep(TICK_SECONDS)
            blocked = self.blocked_for(time.monotonic())
            if blocked >= BLOCKED_WARNING_SECONDS and not said:
                log.warning(
                    "the processors' event loop has not run for %.0fs: a coroutine blocks it "
                    "(time.sleep, a blocking client, long CPU work) and every shard's async "
                    "calls wait; run blocking work with asyncio.to_thread",
                    blocked,
                )
            said = blocked >= BLOCKED_WARNING_SECONDS

    def _run_for_ever(self) -> None:
        """The loop serves every shard: what a processor does to it (`loop.stop()`, a
        task raising SystemExit out of it) must not end it for the others."""
        while not self.loop.is_closed():
            try:
                self.loop.run_forever()
            except BaseException as error:  # (SystemExit or the like, from a task)
                log.error("a processor's task ended the event loop (%r): it goes on", error)
            else:
                if not self.loop.is_closed():
                    log.error("a processor stopped the event loop: it goes on")

    def run(self, awaitable: Awaitable[T]) -> T:
        refused = None
        if threading.current_thread() is self._thread:
            refused = "a processor call made on the processors' event loop would wait for itself"
        elif not self._thread.is_alive():
            # (A coroutine that stopped the loop ended run_forever: nothing submitted
            # after that would ever run, so say so instead of waiting.)
            refused = "the processors' event loop has stopped"
        if refused is not None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError(refused)
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self.loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ProcessorCancelled("the processor's coroutine was cancelled") from None
        except Exception:
            raise
        except BaseException as exit_:  # (from a task it awaited: gather, create_task)
            raise ProcessorExited(f"the processor raised {type(exit_).__name__}") from exit_


_shared: EventLoopThread | None = None
_shared_lock = threading.Lock()


def process_loop() -> EventLoopThread:
    """The one event loop of this process, started at its first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EventLoopThread()
        return _shared


def _forget_loop() -> None:
    global _shared, _shared_lock
    # A forked child has the loop's object but not its thread, and maybe the lock taken.
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)


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


async def _awaited(awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exit_:
        raise ProcessorExited(f"the processor raised {type(exit_).__name__}") from exit_


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
