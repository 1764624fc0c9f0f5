"""ThreadJobs on the pools the operator gives each kind of job: stream calls that hang
hold their own pool, and a status write started meanwhile still runs at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from streamconsumer.controller.consumer.driver import PROBE, STREAM_JOBS
from streamconsumer.controller.consumer.jobs import Job, Outcome, ThreadJobs


def test_hung_stream_calls_do_not_queue_a_status_write() -> None:
    released = threading.Event()
    written: list[Outcome[Any]] = []

    async def scenario() -> None:
        with (
            concurrent.futures.ThreadPoolExecutor(2) as kubernetes,
            concurrent.futures.ThreadPoolExecutor(2) as streams,
        ):
            jobs = ThreadJobs(kubernetes, lambda: None, {kind: streams for kind in STREAM_JOBS})
            for _ in range(3):  # every stream thread taken by a probe that hangs, one queued
                jobs.start(Job(PROBE, lambda: released.wait(10), 10.0, lambda _: None))
            done = asyncio.Event()

            def answered(outcome: Outcome[Any]) -> None:
                written.append(outcome)
                done.set()

            jobs.start(Job("status", lambda: "written", 0.5, answered))
            try:
                await asyncio.wait_for(done.wait(), 2)
            finally:
                released.set()

    asyncio.run(scenario())
    assert written[0].result() == "written", "the write ran, not queued behind the probes"
