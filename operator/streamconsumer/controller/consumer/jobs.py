"""Jobs: blocking calls run elsewhere, each with a timeout, their outcomes delivered back
to a driver that never blocks. The drivers (`driver.py`, `leadership.py`) see only the
`Jobs` port; production runs jobs on thread pools (`ThreadJobs`), the simulation on its
event queue (tests/sim), so both run the same drivers (docs/design.md#one-driver).

Each kind of blocking work has its own pool (`executors.py`), so a slow or throttled
Kinesis can fill the consumers' pool but never delay a Lease renewal or a TokenReview."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """How a job ended: its value, or the exception it raised (TimeoutError past its
    timeout, whatever its call goes on to do)."""

    value: T | None = None
    error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


@dataclass(frozen=True)
class Job(Generic[T]):
    """A blocking call to run elsewhere: `done` gets its outcome exactly once, in the
    driver's context, at the latest `timeout` seconds after the job started. `kind`
    names it (in task names, and for the simulation's latencies)."""

    kind: str
    call: Callable[[], T]
    timeout: float
    done: Callable[[Outcome[T]], None]


class Jobs(Protocol):
    def start(self, job: Job[Any]) -> None: ...


class ThreadJobs:
    """The driver's Jobs on thread pools: `executor`, or the one `by_kind` names for the
    job's kind (so that a slow stream's calls never queue a status write). A job past its
    timeout is answered TimeoutError at once; its thread runs on until the call's own
    timeout ends it (every call the driver makes has one) and holds one of the pool's
    threads meanwhile, so abandoned threads are bounded by the pool's size. A job still
    queued when its timeout comes never runs."""

    def __init__(
        self,
        executor: concurrent.futures.Executor,
        wake: Callable[[], None],
        by_kind: Mapping[str, concurrent.futures.Executor] | None = None,
    ) -> None:
        self._executor = executor
        self._by_kind = dict(by_kind or {})
        self._wake = wake
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cancelled = False

    def start(self, job: Job[Any]) -> None:
        executor = self._by_kind.get(job.kind, self._executor)
        running = asyncio.get_running_loop().run_in_executor(executor, job.call)
        task = asyncio.create_task(asyncio.wait_for(running, job.timeout), name=f"job-{job.kind}")
        self._tasks.add(task)

        def finished(task: asyncio.Task[Any]) -> None:
            self._tasks.discard(task)
            if task.cancelled() or self._cancelled:
                return  # done just before cancel(): its outcome is not delivered either
            error = task.exception()
            job.done(Outcome(error=error) if error is not None else Outcome(value=task.result()))
            self._wake()

        task.add_done_callback(finished)

    def cancel(self) -> None:
        self._cancelled = True
        for task in list(self._tasks):
            task.cancel()
