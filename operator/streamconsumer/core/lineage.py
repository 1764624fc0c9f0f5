"""Shard lineage: which shards may be consumed now (docs/design.md#parents-first), and the
compact set of finished shards that keeps a finished shard finished for as long as the
stream lists it, however many generations of splits and merges follow
(docs/design.md#lineage-is-remembered)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from streamconsumer.shard_end import SHARD_END as SHARD_END  # re-exported: the cores' name


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard as the stream lists it: its parents (one after a split, two after a merge;
    the second is Kinesis' AdjacentParentShardId) and whether it is closed.

    `waits_for`: shards that must be finished first without being parents, so no wire
    message or status lease carries them. A DynamoDB table whose stream was disabled and
    enabled again has a new stream sharing no lineage with the old one: the new
    stream's first shards wait for every last shard of the old one (any number of them;
    parents are at most two)."""

    id: str
    parents: tuple[str, ...] = ()
    closed: bool = False
    hash_range: tuple[int, int] | None = None
    sequence_range: tuple[str, str | None] | None = None  # (starting, ending if closed)
    waits_for: tuple[str, ...] = ()


def assignable_shards(shards: Iterable[Shard], finished: Collection[str]) -> list[str]:
    """Shards that a worker may start now, in listing order: not finished themselves, and
    every parent (and every shard it waits for) finished or gone from the stream
    (trimmed past retention)."""
    shards = list(shards)
    listed = {shard.id for shard in shards}
    return [
        shard.id
        for shard in shards
        if shard.id not in finished
        and all(
            first not in listed or first in finished for first in (*shard.parents, *shard.waits_for)
        )
    ]


# --- the finished set, compact -------------------------------------------------------------

_RANGE = ".."
_DIGITS = "0123456789"


def _numbered(shard_id: str) -> tuple[str, str] | None:
    """(prefix, trailing counter) of an id that ends in ASCII digits, else None; in time
    linear in the id. The regular expression it replaces backtracked over every digit
    from every start (100,000 ids of 128 characters took 21 s, at every status write),
    and took any script's digits, and a digit before a final newline, for a counter:
    compact() wrote those ids back as others."""
    prefix = shard_id.rstrip(_DIGITS)
    return (prefix, shard_id[len(prefix) :]) if len(prefix) < len(shard_id) else None


def compact(shard_ids: Iterable[str]) -> list[str]:
    """Shard ids as a short, sorted list: a run of ids that differ only in a trailing
    counter of the same width becomes "first..last". Kinesis numbers its shards
    (shardId-000000000000, -001, ...) and finished shards are the older ones, so the
    finished set of a stream is mostly a few runs; other ids are kept as they are."""
    runs: list[tuple[str, int, int, int]] = []  # (prefix, width, first, last)
    plain: list[str] = []
    numbered: list[tuple[str, int, int]] = []
    for shard_id in set(shard_ids):
        match = _numbered(shard_id)
        if match and _RANGE not in shard_id:
            numbered.append((match[0], len(match[1]), int(match[1])))
        else:
            plain.append(shard_id)
    for prefix, width, number in sorted(numbered):
        if runs and runs[-1][:2] == (prefix, width) and runs[-1][3] == number - 1:
            runs[-1] = (prefix, width, runs[-1][2], number)
        else:
            runs.append((prefix, width, number, number))
    out = list(plain)
    for prefix, width, first, last in runs:
        low = f"{prefix}{first:0{width}d}"
        out.append(low if first == last else f"{low}{_RANGE}{prefix}{last:0{width}d}")
    return sorted(out)


MAX_TABLE_SHARDS = 100_000
"""The most shards one lease table may name, open and finished together: ten times the
10,000 open shards a consumer is built for (docs/design.md#lease-groups). A table
read from where a tenant can write (a lease group, a kept ConfigMap, an imported file)
naming more is refused before anything is built: the 60 bytes
"shardId-000000000000..shardId-999999999999" name 10^12 shards."""

MAX_SHARD_ID_CHARS = 128  # Kinesis' and DynamoDB Streams' longest shard id


class TableOutOfBounds(ValueError):
    """A lease table names more shards than MAX_TABLE_SHARDS, or an id no stream has."""


def expand(entries: Iterable[str], most: int = MAX_TABLE_SHARDS) -> set[str]:
    """The shard ids of a compact() list; raises TableOutOfBounds, having built nothing,
    where they are more than `most` or one is longer than any shard id."""
    plain: list[str] = []
    runs: list[tuple[str, int, int, int]] = []  # (prefix, width, first, last)
    count = 0
    for entry in entries:
        if not isinstance(entry, str):
            raise TableOutOfBounds(f"a finished shard that is not an id: {type(entry).__name__}")
        low, sep, high = entry.partition(_RANGE)
        if len(low) > MAX_SHARD_ID_CHARS or len(high) > MAX_SHARD_ID_CHARS:
            raise TableOutOfBounds(f"a shard id longer than {MAX_SHARD_ID_CHARS} characters")
        first, last = _numbered(low), _numbered(high)
        if not sep or first is None or last is None or first[0] != last[0]:
            plain.append(entry)
            count += 1
        else:
            runs.append((first[0], len(first[1]), int(first[1]), int(last[1])))
            count += max(0, int(last[1]) - int(first[1]) + 1)
        if count > most:
            raise TableOutOfBounds(f"the table names more than {MAX_TABLE_SHARDS:,} shards")
    out = set(plain)
    for prefix, width, low_number, high_number in runs:
        out.update(f"{prefix}{n:0{width}d}" for n in range(low_number, high_number + 1))
    return out
