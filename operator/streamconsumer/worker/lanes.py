"""Per-key parallelism (`spec.processor.parallelism`), pure: how one delivered batch is
split into up to N groups that may run at once, and what their outcomes make of it.

A key's records (the user record's partition key; for DynamoDB, the item's key) stay in
one group, in order, so they are never processed out of order or concurrently. The
groups are balanced by record count for each batch anew (largest key first onto the
lightest group) rather than by a fixed hash of the key to a lane, as Lambda's
ParallelizationFactor does: a fixed hash leaves some lanes with more keys, and the
slowest lane sets the pace (docs/design.md#per-key-parallelism).

The checkpoint goes no further than the low watermark: the longest prefix of the batch
whose records are all done. Records done beyond it are remembered by the ShardMachine so
a retry does not deliver them again."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence

from streamconsumer.processor import Record


def split(records: Sequence[Record], parallelism: int) -> list[list[int]]:
    """The batch's record indexes in at most `parallelism` groups, no group empty: each
    key's records in one group, in batch order; groups in order of their first record."""
    by_key: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        by_key.setdefault(record.partition_key, []).append(index)
    if parallelism <= 1 or len(by_key) <= 1:
        return [list(range(len(records)))] if records else []
    # Largest first (ties: the key seen first), each onto the lightest group (ties: the
    # lowest group): within 4/3 of the best split, and the same split for the same batch.
    keys = sorted(by_key.values(), key=lambda indexes: (-len(indexes), indexes[0]))
    lightest = [(0, group) for group in range(min(parallelism, len(keys)))]
    groups: list[list[int]] = [[] for _ in lightest]
    for indexes in keys:
        load, group = heapq.heappop(lightest)
        groups[group].extend(indexes)
        heapq.heappush(lightest, (load + len(indexes), group))
    return sorted((sorted(group) for group in groups), key=lambda group: group[0])


def watermark(count: int, done: Collection[int]) -> int:
    """How many of the batch's first records are all done (indexes in `done`): the
    checkpoint may cover those and no more."""
    first_undone = 0
    while first_undone < count and first_undone in done:
        first_undone += 1
    return first_undone
