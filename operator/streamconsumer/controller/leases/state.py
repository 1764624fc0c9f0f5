"""What a lease coordinator keeps besides its leases: the durable state (what the status
holds of the table, read from a status and written into one), each worker's progress as
its heartbeats report it, and what a listing changed. Plain records, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from streamconsumer.core.leases import ShardLease
from streamconsumer.core.lineage import (
    MAX_SHARD_ID_CHARS,
    MAX_TABLE_SHARDS,
    TableOutOfBounds,
    compact,
    expand,
)
from streamconsumer.models import Lease
from streamconsumer.models.api import Failing, HeldShard
from streamconsumer.models.resource import LeaseState, ResetRecord


@dataclass(frozen=True)
class DurableState:
    """What the status holds of the lease table: the operator's only durable state."""

    leases: Mapping[str, ShardLease] = field(default_factory=dict)
    finished: frozenset[str] = frozenset()
    promised_lease_seconds: float | None = None
    last_reset: ResetRecord | None = None
    stream: str | None = None  # the incarnation of the stream the leases are of, once told
    stream_replaced: str | None = None  # another one listed under its name since


def expiry_grace(lease_seconds: float) -> float:
    """Covers one heartbeat in flight: the worker's fence runs from when it *sent* its
    last successful heartbeat, the operator's wait from when it *received* it."""
    return lease_seconds / 3


@dataclass
class WorkerProgress:
    expires_at: float  # operator clock: the longest promise made to it, plus the grace
    draining: bool = False
    millis_behind: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, Failing] = field(default_factory=dict)  # retries used up, policy block
    processed: dict[str, str] = field(default_factory=dict)  # the last record it processed
    failing: set[str] = field(default_factory=set)  # shards whose calls it reports failing

    def report(self, owned: Sequence[HeldShard]) -> bool:
        """Takes what a heartbeat reports of the shards it owns (under the epochs it
        claims); True if the blocked ones changed."""
        self.millis_behind = {
            h.shard_id: h.millis_behind_latest for h in owned if h.millis_behind_latest is not None
        }
        blocked = {h.shard_id: h.failing for h in owned if h.failing and h.failing.blocked}
        changed = blocked.keys() != self.blocked.keys()
        self.blocked = blocked
        self.processed = {h.shard_id: h.sequence_number for h in owned if h.sequence_number}
        self.failing = {h.shard_id for h in owned if h.failing}
        return changed


@dataclass(frozen=True)
class ShardChanges:
    """What a new listing changed: shards that appeared, and leases dropped because their
    shard left the stream before it was finished (retention)."""

    new: list[str]
    expired_unfinished: list[str]


def creation_time(resource: Mapping[str, Any]) -> datetime:
    """The resource's creationTimestamp: the instant `initialPosition: LATEST` starts at."""
    return datetime.fromisoformat(resource["metadata"]["creationTimestamp"])


def durable_from_status(status: Mapping[str, Any] | None) -> DurableState:
    """The durable state as the status last persisted it; raises ValueError (pydantic's
    among them) for a table this operator cannot read, TableOutOfBounds for one larger
    than any stream's (a kept table or lease group is a tenant's ConfigMap)."""
    status = status or {}
    stored = status.get("leases") or {}
    listed = status.get("finishedShards") or []
    if not isinstance(stored, Mapping) or not isinstance(listed, list):
        raise ValueError("leases must be a table and finishedShards a list")
    if len(stored) > MAX_TABLE_SHARDS or any(len(sid) > MAX_SHARD_ID_CHARS for sid in stored):
        raise TableOutOfBounds(
            f"the leases name more than {MAX_TABLE_SHARDS:,} shards, or an id longer than "
            f"{MAX_SHARD_ID_CHARS} characters"
        )
    outside = (LeaseState.IN_LEASE_GROUPS, LeaseState.IN_LEASE_LOG)
    if any(isinstance(body, Mapping) and body.get("state") in outside for body in stored.values()):
        raise ValueError("a table kept in lease groups was read without its groups")
    finished = expand(listed, MAX_TABLE_SHARDS - len(stored))
    leases = {}
    for shard_id, body in stored.items():
        lease = Lease.model_validate(body)
        leases[shard_id] = ShardLease(
            shard_id=shard_id,
            owner=lease.owner,
            epoch=lease.epoch,
            checkpoint=lease.checkpoint,
            state=lease.state,
            handoff_to=lease.handoff_to,
            start=lease.start,
            resetting=lease.resetting,
        )
    promised = status.get("promisedLeaseSeconds")
    last_reset = status.get("lastReset")
    return DurableState(
        leases=leases,
        finished=frozenset(finished),
        promised_lease_seconds=float(promised) if promised is not None else None,
        last_reset=ResetRecord.model_validate(last_reset) if last_reset else None,
        stream=stream if isinstance(stream := status.get("stream"), str) else None,
        stream_replaced=other if isinstance(other := status.get("streamReplaced"), str) else None,
    )


def durable_fields(snapshot: DurableState) -> dict[str, Any]:
    """The status fields that carry a snapshot (the rest of the status is a view)."""
    return {
        "finishedShards": compact(snapshot.finished),
        "promisedLeaseSeconds": snapshot.promised_lease_seconds,
        "lastReset": snapshot.last_reset.wire() if snapshot.last_reset else None,
        "stream": snapshot.stream,
        "streamReplaced": snapshot.stream_replaced,
    }
