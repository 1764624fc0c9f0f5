"""A StreamConsumer's lease table kept apart from the object (docs/checkpoints.md): what
the operator writes when the object is deleted, what a new StreamConsumer of the same
name and stream resumes from, and what `streamconsumer checkpoints export|import` read
and write. The checkpoints otherwise live only in the status, and die with it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from streamconsumer.models.base import Model
from streamconsumer.models.resource import LeaseState, Source

KEPT_FORMAT = 1
_HELD = ("owner", "handoffTo", "millisBehindLatest")  # of the workers that are gone


class KeptTable(Model):
    format: int = Field(default=KEPT_FORMAT, ge=1)
    namespace: str
    consumer: str
    source: Source
    created: datetime = Field(
        description="The deleted object's creationTimestamp: where initialPosition LATEST "
        "started, so a shard that had not started yet loses nothing in between."
    )
    taken: datetime
    expires: datetime
    drained: bool = Field(
        description="Every shard was handed off before it was taken: no record was "
        "processed past these checkpoints."
    )
    status: dict[str, Any] = Field(
        description="The status' durable part: leases (no owners), finishedShards, lastReset."
    )


def ownerless(status: dict[str, Any]) -> dict[str, Any]:
    """The durable part of a status, as a table nobody holds: its workers are gone, and a
    new object's workers start from the checkpoints (epochs go on growing)."""
    leases = {}
    for shard_id, lease in (status.get("leases") or {}).items():
        kept = {
            k: v for k, v in lease.items() if k not in ("owner", "handoffTo", "millisBehindLatest")
        }
        if kept.get("state") != LeaseState.FINISHED:
            kept["state"] = LeaseState.RELEASED.value
        if kept.pop("resetting", False):  # a reset waiting for its owner: nobody owns it now
            kept.pop("checkpoint", None)
        leases[shard_id] = kept
    return {
        "leases": leases,
        "finishedShards": status.get("finishedShards") or [],
        "lastReset": status.get("lastReset"),
    }
