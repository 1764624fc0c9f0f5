"""`streamconsumer reset`'s pure part: what the user asked for, and which shards it
touches (finished shards never move: their children may have started)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from streamconsumer.models.resource import ResetPosition

POSITIONS = ("trim-horizon", "latest", "timestamp")


class ResetError(ValueError):
    """A reset that cannot be asked for, worded for the user."""


def parse_position(words: Sequence[str], now: datetime) -> ResetPosition:
    """`trim-horizon`, `latest` (what arrives from now on) or `timestamp T` (ISO 8601)."""
    kind, *rest = words
    if kind not in POSITIONS:
        raise ResetError(f"--to takes one of {', '.join(POSITIONS)}, not {kind!r}")
    if kind == "timestamp":
        if len(rest) != 1:
            raise ResetError("--to timestamp needs one time, e.g. 2026-11-23T10:00:00Z")
        try:
            instant = datetime.fromisoformat(rest[0])
        except ValueError:
            raise ResetError(f"not an ISO 8601 time: {rest[0]!r}") from None
        if instant.tzinfo is None:
            raise ResetError(f"give the time zone: {rest[0]}Z for UTC")
        if instant > now:
            raise ResetError(f"{rest[0]} is in the future")
        return ResetPosition(timestamp=instant)
    if rest:
        raise ResetError(f"--to {kind} takes no value")
    return ResetPosition(timestamp=now if kind == "latest" else None)


def shards_to_reset(status: Mapping[str, Any], asked: Sequence[str]) -> list[str]:
    """The unfinished shards of the lease table (those asked for, if any)."""
    leases: Mapping[str, Any] = status.get("leases") or {}
    unknown = sorted(set(asked) - set(leases))
    if unknown:
        raise ResetError(f"no lease for {', '.join(unknown)} (see `streamconsumer status`)")
    return [
        shard_id
        for shard_id, lease in sorted(leases.items())
        if (not asked or shard_id in asked) and lease.get("state") != "Finished"
    ]


def describe(position: ResetPosition) -> str:
    if position.timestamp is None:
        return "TRIM_HORIZON"
    return f"AT_TIMESTAMP {position.timestamp.astimezone(UTC).isoformat()}"
