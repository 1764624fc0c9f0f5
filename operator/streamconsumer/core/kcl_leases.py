"""A KCL lease table read as this consumer's starting checkpoints (docs/migrating-from-kcl.md):
the switch from KCL (Java, or Python through kclpy's MultiLangDaemon) without replaying
or skipping the stream. Pure: the items come in as DynamoDB holds them (deserialized),
the stream's shards as it lists them; what needs a record read (is a checkpoint's record a
KPL aggregate, and is it still in the stream?) is asked of `aggregate_parts`.

KCL keeps one item per lease: `leaseKey` (the shard id, or `account:stream:epoch:shardId`
in multi-stream mode), `checkpoint` (a sequence number or a sentinel), and
`checkpointSubSequenceNumber` (the user record inside a KPL aggregate), `leaseCounter`
(moved by its holder at every renewal), `leaseOwner`, `parentShardId`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamconsumer.core.lineage import MAX_TABLE_SHARDS, SHARD_END, Shard
from streamconsumer.models.resource import LeaseState

TRIM_HORIZON = "TRIM_HORIZON"
LATEST = "LATEST"
AT_TIMESTAMP = "AT_TIMESTAMP"
MAX_LEASE_KEY_CHARS = 512  # a multi-stream key: 12 + 128 + 20 + a shard id, and colons
MAX_KCL_ITEMS = MAX_TABLE_SHARDS  # a table of more leases is no lease table of one stream
# A checkpoint inside a KPL aggregate resumes at the aggregate's arrival time less this:
# arrival times are approximate, so the records just before it are replayed, never skipped.
AGGREGATE_REPLAY = timedelta(seconds=1)


class KclTableRefused(ValueError):
    """A KCL lease table this consumer must not start from; the text says why and what to do."""


@dataclass(frozen=True, slots=True)
class KclLease:
    shard_id: str
    stream: str | None  # multi-stream mode: the stream's name in the key
    checkpoint: str
    sub_sequence: int
    counter: int
    owner: str | None
    parents: tuple[str, ...]


def parsed(item: Mapping[str, Any]) -> KclLease:
    """One lease as KCL wrote it; KclTableRefused for an item that is not one."""
    key = item.get("leaseKey")
    if not isinstance(key, str) or not 0 < len(key) <= MAX_LEASE_KEY_CHARS:
        raise KclTableRefused(f"an item with no leaseKey KCL writes: {str(key)[:80]!r}")
    checkpoint = item.get("checkpoint")
    if not isinstance(checkpoint, str) or not checkpoint:
        raise KclTableRefused(f"lease {key}: no checkpoint (is this a KCL lease table?)")
    parts = key.split(":")
    stream = None
    if len(parts) == 4:  # account:stream:creationEpoch:shardId
        stream, shard_id = parts[1], parts[3]
    elif len(parts) == 1:
        shard_id = key
    else:
        raise KclTableRefused(f"lease {key}: neither a shard id nor a multi-stream key")
    parents = item.get("parentShardId") or ()
    return KclLease(
        shard_id=shard_id,
        stream=stream,
        checkpoint=checkpoint,
        sub_sequence=int(item.get("checkpointSubSequenceNumber") or 0),
        counter=int(item.get("leaseCounter") or 0),
        owner=item.get("leaseOwner") or None,
        parents=tuple(sorted(str(p) for p in parents)),
    )


def of_stream(items: Iterable[Mapping[str, Any]], stream: str) -> dict[str, KclLease]:
    """The leases of `stream`, by shard id: all of a single-stream table, those that name
    it of a multi-stream one."""
    leases = [parsed(item) for item in items]
    if len(leases) > MAX_KCL_ITEMS:
        raise KclTableRefused(f"more than {MAX_KCL_ITEMS:,} leases: not one stream's table")
    named = {lease.stream for lease in leases} - {None}
    if named and stream not in named:
        raise KclTableRefused(
            f"a multi-stream table with no lease of stream {stream} (it has: "
            f"{', '.join(sorted(str(n) for n in named)[:5])})"
        )
    mine = [lease for lease in leases if not named or lease.stream == stream]
    found: dict[str, KclLease] = {}
    for lease in mine:
        if lease.shard_id in found:
            raise KclTableRefused(
                f"shard {lease.shard_id} has two leases (the stream was deleted and created "
                "again under its name?): remove the old incarnation's leases first"
            )
        found[lease.shard_id] = lease
    return found


def held(before: Mapping[str, KclLease], after: Mapping[str, KclLease]) -> list[KclLease]:
    """The leases a KCL worker renewed or created between two reads: it still runs."""
    return [
        lease
        for shard_id, lease in after.items()
        if shard_id not in before or before[shard_id].counter != lease.counter
    ]


AggregateParts = Callable[[str, str], tuple[int, datetime]]
"""(shard id, sequence number) -> how many user records the record there holds, and when
it arrived; LookupError if the stream no longer holds it. KCL writes sub-sequence 0 both
for a whole record and for an aggregate's first part: only the record tells them apart."""


def durable_status(
    leases: Mapping[str, KclLease],
    shards: Sequence[Shard],
    now: datetime,
    aggregate_parts: AggregateParts | None,
    at_timestamp: datetime | None = None,
) -> dict[str, Any]:
    """The status a new consumer resumes from (what `models.kept.ownerless` keeps of ours):
    each lease's position, SHARD_END as a finished shard, parents as the stream lists them.
    Refuses a table of another stream, a lease of a shard past the stream's retention
    that KCL had not finished (its records are gone), and AT_TIMESTAMP leases without
    `at_timestamp` (KCL does not keep the time). `aggregate_parts` None: a stream of no
    KPL aggregates (DynamoDB Streams), whose records are not read."""
    listed = {shard.id: shard for shard in shards}
    if leases and listed and not set(leases) & set(listed):
        raise KclTableRefused(
            f"none of its {len(leases)} leases names a shard of this stream: the table of "
            "another stream?"
        )
    gone = [s for s, lease in leases.items() if s not in listed and lease.checkpoint != SHARD_END]
    if gone:
        raise KclTableRefused(
            f"{len(gone)} unfinished leases name shards the stream no longer lists (past "
            f"its retention, so their records are gone): {', '.join(sorted(gone)[:5])}"
        )
    table: dict[str, Any] = {}
    for shard_id, lease in sorted(leases.items()):
        shard = listed.get(shard_id)
        parents = list(shard.parents if shard is not None else lease.parents)
        entry: dict[str, Any] = {"epoch": 0, "state": LeaseState.RELEASED.value}
        if parents:
            entry["parents"] = parents
        entry.update(_position(lease, shard, now, aggregate_parts, at_timestamp))
        table[shard_id] = entry
    return {"leases": table, "finishedShards": [], "lastReset": None}


def _position(
    lease: KclLease,
    shard: Shard | None,
    now: datetime,
    aggregate_parts: AggregateParts | None,
    at_timestamp: datetime | None,
) -> dict[str, Any]:
    """Where the lease's shard goes on: its checkpoint, or where it starts."""
    said = lease.checkpoint
    if said == SHARD_END:
        return {"checkpoint": SHARD_END, "state": LeaseState.FINISHED.value}
    if said == TRIM_HORIZON:
        return {"start": {"timestamp": None}}
    if said == LATEST:  # KCL would have started at the tip when it got there: from now on
        return {"start": {"timestamp": now.isoformat()}}
    if said == AT_TIMESTAMP:
        if at_timestamp is None:
            raise KclTableRefused(
                f"shard {lease.shard_id} starts AT_TIMESTAMP, whose time KCL keeps in its "
                "own configuration: say it with --at-timestamp"
            )
        return {"start": {"timestamp": at_timestamp.isoformat()}}
    if not said.isdigit() or len(said) > 128:
        raise KclTableRefused(f"shard {lease.shard_id}: checkpoint {said[:40]!r} is no position")
    if shard is not None and shard.sequence_range is not None:
        first, last = shard.sequence_range
        if last is not None and int(last) < int(first):
            last = None  # an end below the start says nothing (kinesis-mock's 2^63-1)
        if int(said) < int(first) or (last is not None and int(said) > int(last)):
            raise KclTableRefused(
                f"shard {lease.shard_id}: checkpoint {said} is outside the shard's sequence "
                "numbers: the table of another stream, or of one deleted and created again?"
            )
    if aggregate_parts is None:
        if lease.sub_sequence > 0:
            raise KclTableRefused(
                f"shard {lease.shard_id}: a sub-sequence number, on a stream of no KPL"
            )
        return {"checkpoint": said}
    try:
        parts, arrived = aggregate_parts(lease.shard_id, said)
    except LookupError:
        raise KclTableRefused(
            f"shard {lease.shard_id}: the record KCL checkpointed ({said}) is past the "
            "stream's retention: records after it may be gone too"
        ) from None
    if lease.sub_sequence < parts - 1:  # inside a KPL aggregate: its rest is not done
        return {"start": {"timestamp": (arrived - AGGREGATE_REPLAY).isoformat()}}
    return {"checkpoint": said}
