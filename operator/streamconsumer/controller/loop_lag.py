"""How late the event loop runs what is due: one coroutine that sleeps a second at a time
and reports the overshoot (metrics.LOOP_LAG). Every consumer loop, the worker API and the
election's bookkeeping share this loop, so its lag is what an operator at scale runs out
of first, before its CPU shows it (docs/sizing.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SAMPLE_SECONDS = 1.0


async def sample_lag(
    observe: Callable[[float], None],
    clock: Callable[[], float] = time.monotonic,
    interval: float = SAMPLE_SECONDS,
) -> None:
    """Observes each wake-up's lateness, forever (cancel to stop)."""
    while True:
        due = clock() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, clock() - due))
