"""Shard lineage: which shards may be consumed now (parents first, DESIGN §3.4)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
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


def assignable_shards(
    shards: Iterable[Shard],
    checkpoints: Mapping[str, str | None],
    started: Collection[str] = (),
) -> list[str]:
    """Shards that a worker may start now, in listing order: not finished themselves, and
    every parent finished — checkpointed at SHARD_END, gone from the stream (trimmed past
    retention), or known finished because one of its children has started (finished
    leases leave the status once their children have started)."""
    shards = list(shards)
    listed = {shard.id for shard in shards}
    finished = {sid for sid, checkpoint in checkpoints.items() if checkpoint == SHARD_END}
    for shard in shards:
        if shard.id in started:
            finished.update(shard.parents)
    ready = []
    for shard in shards:
        if shard.id in finished:
            continue
        if all(parent not in listed or parent in finished for parent in shard.parents):
            ready.append(shard.id)
    return ready
