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

RACES = frozenset(
    {
        "DELTA_CONCURRENT_APPEND",
        "DELTA_CONCURRENT_DELETE_DELETE",
        "DELTA_CONCURRENT_DELETE_READ",
        "DELTA_CONCURRENT_TRANSACTION",
        "DELTA_CONCURRENT_WRITE",
        "DELTA_METADATA_CHANGED",
        "DELTA_PROTOCOL_CHANGED",
        "DELTA_MAX_COMMIT_RETRIES_EXCEEDED",  # Delta's own retries of a race ran out
    }
)
"""Delta's error classes for a commit refused because another commit won the race (its
delta-error-classes.json): the write may run again. Nothing else may: an error that only
mentions one of these (a record's value in a cast error, a cause's text) is not a race."""
# Where the error carries no condition: only its first line, as Spark and py4j begin it.
RACE_LINE = re.compile(
    r"^(?:\[(?P<condition>[A-Z_]+)(?:\.[A-Z_]+)?\]"
    r"|io\.delta\.exceptions\.(?P<exception>[A-Za-z]+)Exception\b)"
)
PY4J_HEADER = "An error occurred while calling"
RACE_EXCEPTIONS = {
    "ConcurrentAppend": "DELTA_CONCURRENT_APPEND",
    "ConcurrentDeleteDelete": "DELTA_CONCURRENT_DELETE_DELETE",
    "ConcurrentDeleteRead": "DELTA_CONCURRENT_DELETE_READ",
    "ConcurrentTransaction": "DELTA_CONCURRENT_TRANSACTION",
    "ConcurrentWrite": "DELTA_CONCURRENT_WRITE",
    "MetadataChanged": "DELTA_METADATA_CHANGED",
    "ProtocolChanged": "DELTA_PROTOCOL_CHANGED",
}
FIRST_DELAY_SECONDS = 0.2
MAX_DELAY_SECONDS = 5.0
WARN_EVERY = 20
"""Lost races in a row between warnings (about every 100 s at the capped pause)."""


def is_conflict(error: BaseException) -> bool:
    return _condition(error) in RACES


def _condition(error: BaseException) -> str | None:
    """The error's class (pyspark's `getCondition`, without its sub-class), or what the
    first line of its message names; None when there is neither, or reading it fails (a
    py4j error asks a JVM that may be gone)."""
    try:
        condition = error.getCondition() if hasattr(error, "getCondition") else None
        if isinstance(condition, str) and condition:
            return condition.partition(".")[0]
        text = str(error).lstrip()
        if text.startswith(PY4J_HEADER):  # the Java exception starts the second line
            text = text.partition("\n")[2].removeprefix(": ")
        match = RACE_LINE.match(text)
    except Exception:
        return None
    if match is None:
        return None
    return match["condition"] or RACE_EXCEPTIONS.get(match["exception"] or "")


def until_committed(
    write: Callable[[], T],
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> tuple[T, int]:
    """Runs `write` until Delta accepts its commit; returns its result and how many of
    its commits lost a race. Any other error is raised at once. A write that lost a race
    has committed nothing, and running it again is what Delta asks for (each sink's write
    is one atomic commit that a repeat makes harmless).

    Lost races are retried for as long as the call runs, with no count that ends them:
    an error raised out of here is the processor's failure, and the failure policy's
    `then: skip` would drop the batch (the mirror silently diverging) or `block` the
    shard. What stops a write that can never win is the processor call's own
    `timeoutSeconds`: a hung call, so the worker restarts and the shard's next owner
    replays the batch from its checkpoint; nothing is skipped. (A job outside a worker,
    such as the apply job, keeps trying.) The pause doubles from FIRST_DELAY_SECONDS to
    MAX_DELAY_SECONDS, jittered, and every WARN_EVERY lost races in a row a warning says
    so."""
    delay, lost = FIRST_DELAY_SECONDS, 0
    while True:
        try:
            return write(), lost
        except Exception as error:
            if not is_conflict(error):
                raise
            lost += 1
            # Jittered: writers that collided must not collide again in step.
            pause = min(delay * (0.5 + jitter() / 2), MAX_DELAY_SECONDS)
            level = logging.WARNING if lost % WARN_EVERY == 0 else logging.INFO
            log.log(
                level, "delta: %s lost a commit race (%d so far); again in %.1fs", what, lost, pause
            )
            sleep(pause)
            delay = min(delay * 2, MAX_DELAY_SECONDS)
