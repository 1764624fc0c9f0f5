"""Shard lineage: which shards may be consumed now (parents first, DESIGN §3.4)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SHARD_END = "SHARD_END"


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard as the stream lists it: its parents (one after a split, two after a merge;
    the second is Kinesis' AdjacentParentShardId) and whether it is closed."""

    id: str
    parents: tuple[str, ...] = ()
    closed: bool = False
    hash_range: tuple[int, int] | None = None
    sequence_range: tuple[str, str | None] | None = None  # (starting, ending if closed)


def assignable_shards(shards: Iterable[Shard], checkpoints: Mapping[str, str | None]) -> list[str]:
    """Shards that a worker may start now, in listing order: not finished themselves, and
    every parent either finished (checkpointed at SHARD_END) or gone from the stream
    (trimmed past retention, so nothing of it is left to read)."""
    shards = list(shards)
    listed = {shard.id for shard in shards}
    ready = []
    for shard in shards:
        if checkpoints.get(shard.id) == SHARD_END:
            continue
        if all(
            parent not in listed or checkpoints.get(parent) == SHARD_END for parent in shard.parents
        ):
            ready.append(shard.id)
    return ready
