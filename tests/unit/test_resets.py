"""`streamconsumer reset`'s input, and the coordinator's side of a reset (issue 13.4)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.core.leases import HANDOFF, RELEASED
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import CheckpointRequest, HeartbeatRequest, StartPositionType
from streamconsumer.models.resource import ResetPosition, ResetRequest
from streamconsumer.resets import ResetError, parse_position, shards_to_reset
from testbed.specs import consumer_spec

from .moments import CREATED

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SPEC = consumer_spec()


def test_positions() -> None:
    assert parse_position(["trim-horizon"], NOW) == ResetPosition()
    assert parse_position(["latest"], NOW) == ResetPosition(timestamp=NOW)
    at = parse_position(["timestamp", "2026-11-23T10:00:00Z"], NOW)
    assert at.timestamp == datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["earliest"], "--to takes one of trim-horizon, latest, timestamp"),
        (["timestamp"], "--to timestamp needs one time"),
        (["timestamp", "yesterday"], "not an ISO 8601 time"),
        (["timestamp", "2026-11-23T10:00:00"], "give the time zone"),
        (["timestamp", "2027-01-01T00:00:00Z"], "is in the future"),
        (["latest", "now"], "--to latest takes no value"),
    ],
)
def test_bad_positions_say_what_to_fix(words: list[str], message: str) -> None:
    with pytest.raises(ResetError, match=message):
        parse_position(words, NOW)


def test_finished_shards_never_move_and_unknown_ones_are_refused() -> None:
    status = {"leases": {"a": {"state": "Active"}, "b": {"state": "Finished"}}}
    assert shards_to_reset(status, []) == ["a"]
    with pytest.raises(ResetError, match="no lease for c"):
        shards_to_reset(status, ["c"])


def test_an_owned_shard_is_handed_off_before_it_moves_once_per_request() -> None:
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("a"), Shard("b", closed=True), Shard("c", ("b",))])
    coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    coordinator.step(0.0)
    coordinator.persisted(coordinator.snapshot(0.0), coordinator.version)
    b = coordinator.leases["b"]
    coordinator.checkpoint(
        CheckpointRequest(worker="w", shard_id="b", epoch=b.epoch, sequence_number="5")
    )
    request = ResetRequest(id="r1", to=ResetPosition(timestamp=NOW))
    coordinator.request_reset(request)
    assert coordinator.last_reset is not None
    assert coordinator.last_reset.shards == ["a", "b", "c"], "c, waiting for b, too"
    coordinator.step(1.0)
    assert coordinator.leases["b"].state is HANDOFF
    assert coordinator.leases["b"].checkpoint == "5", "kept until the owner lets go"
    coordinator.checkpoint(
        CheckpointRequest(
            worker="w", shard_id="b", epoch=b.epoch, sequence_number="7", release=True
        )
    )
    coordinator.step(2.0)
    lease = coordinator.leases["b"]
    assert lease.checkpoint is None
    assert lease.epoch > b.epoch or lease.state is RELEASED
    start = coordinator.start_of("b")
    assert start.type is StartPositionType.AT_TIMESTAMP
    assert start.timestamp == NOW
    coordinator.leases["a"] = coordinator.leases["a"].__class__("a", checkpoint=SHARD_END)
    coordinator.request_reset(request)  # the same request again (an operator restart)
    assert coordinator.leases["a"].checkpoint == SHARD_END, "applied once per id"
