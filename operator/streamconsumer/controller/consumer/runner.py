"""The production host of a ConsumerDriver: ticks it on asyncio whenever something
changed (or every 0.2 s); its jobs run on a bounded thread pool (`jobs.ThreadJobs`)."""

from __future__ import annotations

from collections.abc import Callable

from streamconsumer.controller.consumer.driver import ConsumerDriver
from streamconsumer.controller.consumer.jobs import ThreadJobs
from streamconsumer.controller.consumer.registry import ManagedConsumer

TICK_SECONDS = 0.2


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
