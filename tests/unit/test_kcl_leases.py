"""A KCL lease table read as a new consumer's checkpoints (`core/kcl_leases.py`): each
sentinel and position as KCL means it, multi-stream keys, and every table refused where
starting from it would skip or replay what the user did not ask for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from streamconsumer.core.kcl_leases import (
    AGGREGATE_REPLAY,
    KclTableRefused,
    durable_status,
    held,
    of_stream,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models.kept import as_resumed
from streamconsumer.models.resource import Lease

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PARENT, LEFT, RIGHT, OTHER = (f"shardId-00000000000{i}" for i in range(4))
SHARDS = [
    Shard(PARENT, closed=True, sequence_range=("100", "199")),
    Shard(LEFT, parents=(PARENT,), sequence_range=("200", None)),
    Shard(RIGHT, parents=(PARENT,), sequence_range=("300", None)),
    Shard(OTHER, sequence_range=("400", None)),
]


def item(key: str, checkpoint: str, **more: Any) -> dict[str, Any]:
    """As boto3's TypeDeserializer gives KCL's item: numbers as Decimal, sets as sets."""
    return {
        "leaseKey": key,
        "checkpoint": checkpoint,
        "checkpointSubSequenceNumber": Decimal(more.pop("sub", 0)),
        "leaseCounter": Decimal(more.pop("counter", 7)),
        "leaseOwner": more.pop("owner", "worker-1"),
        "ownerSwitchesSinceCheckpoint": Decimal(0),
        **more,
    }


def whole_records(shard_id: str, sequence: str) -> tuple[int, datetime]:
    """Every record a plain one (no KPL aggregate)."""
    return 1, NOW - timedelta(hours=1)


def status_of(items: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    leases = of_stream(items, "clicks")
    aggregates = options.pop("aggregate_parts", whole_records)
    return durable_status(leases, SHARDS, NOW, aggregates, **options)


def test_each_kcl_position_becomes_where_the_shard_goes_on() -> None:
    status = status_of(
        [
            item(PARENT, "SHARD_END", parentShardId=set()),
            item(LEFT, "TRIM_HORIZON", parentShardId={PARENT}),
            item(RIGHT, "LATEST", parentShardId={PARENT}),
            item(OTHER, "412"),
        ]
    )
    leases = status["leases"]
    assert leases[PARENT] == {"epoch": 0, "state": "Finished", "checkpoint": "SHARD_END"}
    assert leases[LEFT] == {
        "epoch": 0,
        "state": "Released",
        "parents": [PARENT],
        "start": {"timestamp": None},  # TRIM_HORIZON
    }
    assert leases[RIGHT]["start"] == {"timestamp": NOW.isoformat()}, "LATEST: from the import on"
    assert leases[OTHER] == {"epoch": 0, "state": "Released", "checkpoint": "412"}
    for body in as_resumed(status)["leases"].values():  # what a new consumer takes
        Lease.model_validate(body)


def test_at_timestamp_needs_the_time_kcl_was_configured_with() -> None:
    with pytest.raises(KclTableRefused, match="--at-timestamp"):
        status_of([item(OTHER, "AT_TIMESTAMP")])
    then = NOW - timedelta(days=1)
    status = status_of([item(OTHER, "AT_TIMESTAMP")], at_timestamp=then)
    assert status["leases"][OTHER]["start"] == {"timestamp": then.isoformat()}


def test_a_checkpoint_inside_a_kpl_aggregate_replays_the_aggregate_never_skips_it() -> None:
    arrived = NOW - timedelta(minutes=5)
    reads: list[tuple[str, str]] = []

    def five_parts(shard_id: str, sequence: str) -> tuple[int, datetime]:
        reads.append((shard_id, sequence))
        return 5, arrived

    inside = status_of([item(OTHER, "450", sub=2)], aggregate_parts=five_parts)
    assert inside["leases"][OTHER]["start"] == {
        "timestamp": (arrived - AGGREGATE_REPLAY).isoformat()
    }
    assert "checkpoint" not in inside["leases"][OTHER], "after 450 would skip parts 3 and 4"
    whole = status_of([item(OTHER, "450", sub=4)], aggregate_parts=five_parts)
    assert whole["leases"][OTHER]["checkpoint"] == "450", "its last part: the whole is done"
    first = status_of([item(OTHER, "450", sub=0)], aggregate_parts=five_parts)
    assert "checkpoint" not in first["leases"][OTHER], "sub-sequence 0 of an aggregate: a part"
    assert reads == [(OTHER, "450")] * 3


def test_a_checkpoint_past_the_streams_retention_is_refused() -> None:
    def trimmed(shard_id: str, sequence: str) -> tuple[int, datetime]:
        raise LookupError(f"shard {shard_id} holds no record {sequence}")

    with pytest.raises(KclTableRefused, match="past the stream's retention"):
        status_of([item(OTHER, "450")], aggregate_parts=trimmed)


def test_a_stream_of_no_aggregates_reads_no_record() -> None:
    leases = of_stream([item(OTHER, "450")], "clicks")
    assert durable_status(leases, SHARDS, NOW, None)["leases"][OTHER]["checkpoint"] == "450"
    leases = of_stream([item(OTHER, "450", sub=2)], "clicks")
    with pytest.raises(KclTableRefused, match="sub-sequence number"):
        durable_status(leases, SHARDS, NOW, None)


def test_a_multi_stream_table_gives_the_leases_of_this_stream_alone() -> None:
    items = [
        item(f"123456789012:clicks:1700000000:{OTHER}", "420"),
        item(f"123456789012:views:1700000000:{OTHER}", "999"),
    ]
    assert of_stream(items, "clicks")[OTHER].checkpoint == "420"
    with pytest.raises(KclTableRefused, match="no lease of stream orders"):
        of_stream(items, "orders")


def test_two_incarnations_of_a_stream_in_one_table_are_refused() -> None:
    items = [
        item(f"123456789012:clicks:1700000000:{OTHER}", "420"),
        item(f"123456789012:clicks:1800000000:{OTHER}", "401"),
    ]
    with pytest.raises(KclTableRefused, match="two leases"):
        of_stream(items, "clicks")


@pytest.mark.parametrize(
    ("items", "said"),
    [
        ([{"checkpoint": "1"}], "no leaseKey"),
        ([{"leaseKey": OTHER}], "no checkpoint"),
        ([item(f"a:b:{OTHER}", "1")], "neither a shard id nor a multi-stream key"),
        ([item(OTHER, "12e4")], "is no position"),
        ([item(OTHER, "399")], "outside the shard's sequence numbers"),
        ([item(PARENT, "250")], "outside the shard's sequence numbers"),
        ([item("shardId-000000000009", "950")], "none of its 1 leases names a shard"),
        ([item(OTHER, "420"), item("shardId-000000000009", "950")], "no longer lists"),
    ],
)
def test_a_table_that_would_skip_or_replay_records_is_refused(
    items: list[dict[str, Any]], said: str
) -> None:
    with pytest.raises(KclTableRefused, match=said):
        status_of(items)


def test_a_finished_shard_past_retention_is_no_loss() -> None:
    gone = "shardId-000000000009"
    status = status_of([item(OTHER, "420"), item(gone, "SHARD_END")])
    assert status["leases"][gone]["state"] == "Finished"


def test_a_lease_whose_counter_moved_is_held_by_a_running_kcl_worker() -> None:
    before = of_stream([item(OTHER, "420", counter=7), item(LEFT, "210", counter=3)], "clicks")
    after = of_stream([item(OTHER, "430", counter=8), item(LEFT, "210", counter=3)], "clicks")
    assert [lease.shard_id for lease in held(before, after)] == [OTHER]
    assert held(after, after) == []
    grown = of_stream([item(OTHER, "430", counter=8), item(RIGHT, "TRIM_HORIZON")], "clicks")
    assert RIGHT in [lease.shard_id for lease in held(after, grown)], "a lease KCL created"


def test_an_ending_sequence_below_the_start_bounds_nothing() -> None:
    """kinesis-mock reports a closed shard's end as 2^63-1, below its records' 56-digit
    sequence numbers: that end says nothing, so a checkpoint in the shard is taken."""
    start = "49650000000000000000000000000000000000000000000000000000"
    shards = [Shard(OTHER, closed=True, sequence_range=(start, str(2**63 - 1)))]
    checkpoint = str(int(start) + 12)
    status = durable_status(
        of_stream([item(OTHER, checkpoint)], "clicks"), shards, NOW, whole_records
    )
    assert status["leases"][OTHER]["checkpoint"] == checkpoint
