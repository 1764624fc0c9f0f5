"""Delta tables that many workers share: the properties that keep them healthy, and
Delta's optimistic-concurrency refusals retried inside the sink, so a commit two writers
raced for is never a processor failure (never retried by the failure policy, never
skipped, never a blocked shard)."""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

HEALTHY_TABLE = {
    # After a commit, the partition's small files are compacted (OPTIMIZE) in the
    # background of the same writer: a shard's 35,000 batches a day stay a few files.
    "delta.autoOptimize.autoCompact": "true",
    # Statistics keep 32 characters of a string by default: sequence numbers (56 digits,
    # the first 32 shared) would all look alike, and a read of one batch touch every file.
    "delta.dataSkippingStringPrefixLength": "64",
}
"""Set on the tables our sinks create (as DataFrameWriter options, which Delta stores as
the table's properties)."""

CHANGE_LOG_TABLE = {
    # Many writers commit to one change log: compaction after each commit, and a log
    # checkpoint every 10 commits, made every writer's commit pay for them (measured
    # together on a Connect server: 4 writers landed 1.6 batches/s with them, 2.9 to 3.4
    # without). The log is read once, by the apply job, and trimmed by its retention.
    "delta.checkpointInterval": "100",
    "delta.dataSkippingStringPrefixLength": "64",
}

# Delta's error classes (Spark Connect, and Delta 4's messages) and its exception names
# (py4j): a commit refused because another commit won the race; the write may run again.
CONFLICT = re.compile(
    r"DELTA_CONCURRENT_[A-Z_]+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED"
    r"|Concurrent[A-Za-z]*Exception|MetadataChangedException|ProtocolChangedException"
)
FIRST_DELAY_SECONDS = 0.2
MAX_DELAY_SECONDS = 5.0


def is_conflict(error: BaseException) -> bool:
    return CONFLICT.search(str(error)) is not None


def until_committed(
    write: Callable[[], T],
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> tuple[T, int]:
    """Runs `write` until Delta accepts its commit; returns its result and how many of
    its commits lost a race. Any other error is raised at once. A conflict does not
    outlast its winner, so this never gives up: a write that lost a race has committed
    nothing, and running it again is what Delta asks for (each sink's write is one atomic
    commit that a repeat makes harmless)."""
    delay, lost = FIRST_DELAY_SECONDS, 0
    while True:
        try:
            return write(), lost
        except Exception as error:
            if not is_conflict(error):
                raise
            lost += 1
            # Jittered: writers that collided must not collide again in step.
            pause = delay * (0.5 + jitter() / 2)
            log.info("delta: %s lost a commit race (%d so far); again in %.1fs", what, lost, pause)
            sleep(pause)
            delay = min(delay * 2, MAX_DELAY_SECONDS)
