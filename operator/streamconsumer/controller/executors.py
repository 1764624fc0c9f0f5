"""The operator's thread pools, one per kind of blocking work, each bounded.

Sharing asyncio's default pool let a slow Kinesis (listings, backlog probes) or a
burst of junk tokens (TokenReviews) queue a Lease renewal behind them until the leader
missed its renew deadline. Every call run here has its own timeout too, so a thread
abandoned by a timed-out job ends by itself."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ELECTION = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="election")
AUTH = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="token-review")
CONSUMER_THREADS = 16  # listings, probes, status writes, scaling of every consumer
CONSUMERS = concurrent.futures.ThreadPoolExecutor(CONSUMER_THREADS, thread_name_prefix="consumer")
KUBERNETES = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="kubernetes")
# Describing streams whose checkpoints are resumed or kept: a leader that takes over loads
# every consumer at once, and an unreachable AWS must not hold the consumers' threads.
STREAMS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="describe")
# Reading and checking lease tables (a status, a kept ConfigMap): CPU and memory bounded
# per table, and by two tables at once, whatever a takeover or the tenants ask for.
TABLES = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tables")


async def run_in(executor: concurrent.futures.Executor, call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, call)
