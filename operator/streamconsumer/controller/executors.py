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

# A Lease call may run a whole renew deadline on a slow apiserver (leadership.py), a
# round starts every retry period: room for the calls of a deadline, and a resignation.
ELECTION_THREADS = 6
ELECTION = concurrent.futures.ThreadPoolExecutor(ELECTION_THREADS, thread_name_prefix="election")
AUTH_THREADS = 4
AUTH = concurrent.futures.ThreadPoolExecutor(AUTH_THREADS, thread_name_prefix="token-review")
# Every consumer's status writes and scale calls (Kubernetes)...
CONSUMER_THREADS = 16
CONSUMERS = concurrent.futures.ThreadPoolExecutor(CONSUMER_THREADS, thread_name_prefix="consumer")
# ...apart from their shard listings and backlog probes (Kinesis, DynamoDB Streams): at
# 200 consumers on a slow stream endpoint, probes held every shared thread until each
# status write's timeout passed before it was taken up, and no consumer ever served.
STREAM_CALL_THREADS = 16
STREAM_CALLS = concurrent.futures.ThreadPoolExecutor(
    STREAM_CALL_THREADS, thread_name_prefix="stream-call"
)
KUBERNETES_THREADS = 4
KUBERNETES = concurrent.futures.ThreadPoolExecutor(
    KUBERNETES_THREADS, thread_name_prefix="kubernetes"
)
# Describing streams whose checkpoints are resumed or kept: a leader that takes over loads
# every consumer at once, and an unreachable AWS must not hold the consumers' threads.
STREAMS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="describe")
# Reading and checking lease tables (a status, a kept ConfigMap): CPU and memory bounded
# per table, and by two tables at once, whatever a takeover or the tenants ask for.
TABLES_THREADS = 2
TABLES = concurrent.futures.ThreadPoolExecutor(TABLES_THREADS, thread_name_prefix="tables")
# The threads that may call the apiserver at once through the operator's client, besides
# the election's own: its connection pool keeps one connection for each. At 10 (the
# client's default, 5 a core) a busy operator discarded connections by the hundred and
# opened new ones, each a TLS handshake for it and the apiserver.
KUBERNETES_CALLERS = AUTH_THREADS + CONSUMER_THREADS + KUBERNETES_THREADS + TABLES_THREADS


async def run_in(executor: concurrent.futures.Executor, call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def run_within(
    executor: concurrent.futures.Executor, call: Callable[[], T], seconds: float
) -> T:
    """`call` on `executor`, given `seconds` from when a thread takes it up (TimeoutError
    after): time spent waiting behind others' calls is not its own. Its thread, if it
    times out, runs on until the call returns: a call run here must be bounded."""
    loop = asyncio.get_running_loop()
    started = asyncio.Event()

    def timed() -> T:
        loop.call_soon_threadsafe(started.set)
        return call()

    running = loop.run_in_executor(executor, timed)
    await started.wait()
    return await asyncio.wait_for(running, seconds)
