"""The processors' event loop: one per worker process, running for ever in a thread of
its own, on which every async call of every shard waits (`streamconsumer.awaiting`).
Apart from `awaiting` so that `processor.FunctionProcessor` (a function returning an
awaitable) runs on it without importing the module that builds on `processor`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
LOOP_THREAD_NAME = "processor-loop"
TICK_SECONDS = 0.5
BLOCKED_WARNING_SECONDS = 5.0  # the loop not running this long is said in the log


class ProcessorExited(RuntimeError):
    """The processor raised a BaseException that is not an Exception (SystemExit,
    KeyboardInterrupt, GeneratorExit, ...): a failed call, retried as any other. Let
    through, it would end the thread that made the call (or the event loop of every async
    call), and leave the shard waiting on a call that never returns."""


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


async def _awaited(awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exit_:
        raise ProcessorExited(f"the processor raised {type(exit_).__name__}") from exit_
