"""Where a shard's new owner starts reading: after its checkpoint, at a reset's position,
at the beginning of a reshard's child, else at the spec's initial position.

`initialPosition: LATEST` means "what arrives from the consumer's creation on": it is
resolved to that instant (AT_TIMESTAMP), never re-read as LATEST when a shard moves before
its first checkpoint, so nothing that arrived meanwhile is skipped."""

from __future__ import annotations

from datetime import datetime

from streamconsumer.core.leases import ShardLease
from streamconsumer.models import StartPosition, StartPositionType
from streamconsumer.models.resource import InitialPosition, StreamConsumerSpec


def start_position(
    spec: StreamConsumerSpec, created: datetime, lease: ShardLease, parents: list[str]
) -> StartPosition:
    """`created`: the resource's creationTimestamp, where LATEST starts."""
    if lease.checkpoint is not None:
        return StartPosition(
            type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=lease.checkpoint
        )
    if lease.start is not None:  # a reset
        if lease.start.timestamp is None:
            return StartPosition(type=StartPositionType.TRIM_HORIZON)
        return StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=lease.start.timestamp)
    if parents:
        # A child of a reshard: its parents were read to the end, so start at its
        # beginning whatever the initial position (as KCL does).
        return StartPosition(type=StartPositionType.TRIM_HORIZON)
    initial = spec.initial_position
    if initial is InitialPosition.AT_TIMESTAMP:
        return StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=spec.initial_timestamp)
    if initial is InitialPosition.LATEST:
        # Not LATEST itself: read again at each move, it would skip what arrived
        # between a grant and the shard's first checkpoint.
        return StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=created)
    return StartPosition(type=StartPositionType.TRIM_HORIZON)
