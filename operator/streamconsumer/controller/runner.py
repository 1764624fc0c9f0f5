"""The production host of a ConsumerDriver: ticks it on asyncio whenever something
changed (or every 0.2 s), and runs its jobs on a bounded thread pool (`ThreadJobs`).

Each kind of blocking work has its own pool (`executors.py`), so a slow or throttled
Kinesis can fill the consumers' pool but never delay a Lease renewal or a TokenReview."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from streamconsumer.controller.driver import ConsumerDriver, Outcome
from streamconsumer.controller.registry import ManagedConsumer

T = TypeVar("T")
TICK_SECONDS = 0.2


class ThreadJobs:
    """The driver's Jobs on a thread pool. A job past its timeout is answered
    TimeoutError at once; its thread runs on until the call's own timeout ends it (every
    call the driver makes has one) and holds one of the pool's threads meanwhile, so
    abandoned threads are bounded by the pool's size. A job still queued when its
    timeout comes never runs."""

    def __init__(self, executor: concurrent.futures.Executor, wake: Callable[[], None]) -> None:
        self._executor = executor
        self._wake = wake
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(
        self,
        kind: str,
        call: Callable[[], T],
        timeout: float,
        done: Callable[[Outcome[T]], None],
    ) -> None:
        running = asyncio.get_running_loop().run_in_executor(self._executor, call)
        task = asyncio.create_task(asyncio.wait_for(running, timeout), name=f"job-{kind}")
        self._tasks.add(task)

        def finished(task: asyncio.Task[T]) -> None:
            self._tasks.discard(task)
            if task.cancelled():
                return
            error = task.exception()
            done(Outcome(error=error) if error is not None else Outcome(value=task.result()))
            self._wake()

        task.add_done_callback(finished)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


async def run_consumer(
    consumer: ManagedConsumer,
    driver: ConsumerDriver,
    jobs: ThreadJobs,
    stopped: Callable[[], bool],
) -> None:
    """Until kopf stops the daemon, this replica stops leading, or a newer term fences
    the status (then `driver.deposed`: the caller ends the process)."""
    try:
        while not stopped() and not driver.deposed:
            driver.tick()
            await consumer.sleep(TICK_SECONDS)
    finally:
        driver.stop()
        jobs.cancel()
