"""Issue 22.4: Lease renewals and TokenReviews shared the default thread pool with
listings, backlog probes, status writes and scaling; a slow Kinesis filled it and a
healthy leader lost its term. Each kind of blocking work now has its own bounded pool."""

from __future__ import annotations

import asyncio
import threading

from streamconsumer.controller import executors


def test_a_full_consumer_pool_delays_neither_the_election_nor_token_reviews() -> None:
    stuck = threading.Event()  # Kinesis not answering

    async def run() -> tuple[str, str]:
        blocked = [
            asyncio.ensure_future(executors.run_in(executors.CONSUMERS, lambda: stuck.wait(30)))
            for _ in range(executors.CONSUMER_THREADS * 2)
        ]
        await asyncio.sleep(0.1)  # every consumer thread is taken, more jobs queue
        try:
            renewal = await asyncio.wait_for(
                executors.run_in(executors.ELECTION, lambda: "renewed"), 10
            )
            review = await asyncio.wait_for(
                executors.run_in(executors.AUTH, lambda: "reviewed"), 10
            )
            assert not any(job.done() for job in blocked), "still stuck meanwhile"
            return renewal, review
        finally:
            stuck.set()
            await asyncio.gather(*blocked)

    assert asyncio.run(run()) == ("renewed", "reviewed")
