"""A deleted consumer's kept lease table (controller/leases/kept.py): what is kept, and when a
new object may resume from it."""

from __future__ import annotations

import base64
import datetime
import gzip
from typing import Any

import pytest

from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.leases import kept as farewells
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.core.lineage import Shard
from streamconsumer.models import HeartbeatRequest, kept
from testbed.specs import consumer_spec

from .moments import CREATED

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
BODY: dict[str, Any] = {
    "metadata": {"creationTimestamp": "2026-11-01T00:00:00Z"},
    "status": {
        "leases": {
            "s0": {"owner": "w1", "epoch": 3, "checkpoint": "49", "state": "Active"},
            "s1": {"owner": "w2", "epoch": 2, "checkpoint": "7", "state": "HandOff",
                   "handoffTo": "w1", "millisBehindLatest": 10},
            "s2": {"owner": "w2", "epoch": 4, "checkpoint": "9", "state": "Active",
                   "resetting": True, "start": {"timestamp": None}},
            "s3": {"epoch": 1, "checkpoint": "SHARD_END", "state": "Finished"},
        },
        "finishedShards": ["s9"],
        "term": {"number": 4, "holder": "op"},
    },
}  # fmt: skip


def test_the_kept_table_is_nobodys_and_keeps_every_position() -> None:
    table = kept.table("ns", "clicks", consumer_spec(), BODY, NOW, drained=False)
    leases = table.status["leases"]
    assert all("owner" not in lease and "handoffTo" not in lease for lease in leases.values())
    assert leases["s0"] == {"epoch": 3, "checkpoint": "49", "state": "Released"}
    assert leases["s1"]["checkpoint"] == "7"
    assert "checkpoint" not in leases["s2"], "a reset waiting for its owner applies now"
    assert leases["s2"]["start"] == {"timestamp": None}
    assert leases["s3"]["state"] == "Finished"
    assert table.status["finishedShards"] == ["s9"]
    assert "term" not in table.status
    assert table.created == datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    assert table.expires == NOW + datetime.timedelta(days=7)


def test_a_new_object_resumes_only_its_own_streams_unexpired_table() -> None:
    spec = consumer_spec()
    data = kept.config_map(kept.table("ns", "clicks", spec, BODY, NOW, True), "clicks-checkpoints")[
        "data"
    ]
    table, _ = kept.resumable(data, "clicks", spec, NOW)
    assert table is not None
    moved = consumer_spec(source={"kinesis": {"streamName": "s", "endpointURL": "https://k.x"}})
    assert kept.resumable(data, "clicks", moved, NOW)[0] is not None, "endpoint: same stream"
    other = consumer_spec(source={"kinesis": {"streamName": "other"}})
    assert kept.resumable(data, "clicks", other, NOW) == (
        None,
        "the kept checkpoints are of another stream",
    )
    assert kept.resumable(data, "views", spec, NOW)[1] == "the kept checkpoints are clicks's"
    later = NOW + datetime.timedelta(days=8)
    assert "expired" in kept.resumable(data, "clicks", spec, later)[1]
    with pytest.raises(kept.KeptTableInvalid, match="unreadable"):  # not afresh: stalled
        kept.resumable({kept.TABLE_KEY: "{"}, "clicks", spec, NOW)
    assert kept.resumable(None, "clicks", spec, NOW) == (None, "no checkpoints kept")


STREAM = "arn:aws:kinesis:us-east-1:000000000000:stream/s created 2026-11-01T00:00:00+00:00"
AGAIN = "arn:aws:kinesis:us-east-1:000000000000:stream/s created 2026-11-20T09:00:00+00:00"


def test_the_table_names_the_stream_incarnation_it_is_of() -> None:
    table = kept.table("ns", "clicks", consumer_spec(), BODY, NOW, True, stream=STREAM)
    assert kept.kept_stream(table) == STREAM
    assert kept.another_incarnation(table, STREAM) == ""
    why = kept.another_incarnation(table, AGAIN)
    assert "deleted and created again" in why
    assert (STREAM in why, AGAIN in why) == (True, True)
    # Kept again (an export of a kept table, a resume then a delete): it stays said.
    again = kept.table("ns", "clicks", consumer_spec(), {**BODY, "status": table.status}, NOW, True)
    assert kept.kept_stream(again) == STREAM


def test_a_table_that_does_not_name_its_stream_is_not_refused_for_it() -> None:
    table = kept.table("ns", "clicks", consumer_spec(), BODY, NOW, True)
    assert kept.kept_stream(table) is None
    assert kept.another_incarnation(table, AGAIN) == ""


def test_the_farewell_pauses_until_no_shard_is_held_and_that_is_saved() -> None:
    coordinator = LeaseCoordinator(
        consumer_spec(lease_seconds=6), DurableState(), 0.0, created=CREATED
    )
    loop = ConsumerLoop("c", coordinator, LoopSettings(shard_sync_seconds=10.0), lambda: 1)
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    fence = loop.write_due(0.0)
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    loop.step(0.0)
    assert coordinator.leases["s0"].owner == "w"

    farewell = farewells.Farewell(loop, seconds=12.0)
    assert not farewell.over(1.0)
    assert coordinator.spec.paused
    assert loop.paused_by == "the deletion of the StreamConsumer"
    assert not farewell.over(5.0), "still held"
    assert farewell.over(13.0), "given up after its time"
    assert not farewell.drained


def _packed(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode())).decode()


def test_of_two_copies_of_a_kept_table_the_one_taken_last_is_read() -> None:
    """Found by review: `checkpoints import` and the operator apply the ConfigMap as two
    field managers; one's plain copy stayed beside the other's packed one, and the
    plain, older one was read: most shards resumed from stale checkpoints."""
    older = kept.table("ns", "clicks", consumer_spec(), BODY, NOW, drained=True)
    newer = older.model_copy(update={"taken": NOW + datetime.timedelta(hours=1)})
    plain, packed = older.model_dump_json(by_alias=True), newer.model_dump_json(by_alias=True)
    data = kept.kept_data({kept.TABLE_KEY: plain}, {kept.PACKED_KEY: _packed(packed)})
    assert data[kept.TABLE_KEY] == packed
    data = kept.kept_data({kept.TABLE_KEY: packed}, {kept.PACKED_KEY: _packed(plain)})
    assert data[kept.TABLE_KEY] == packed


def test_a_packed_table_that_inflates_past_the_cap_is_refused_not_read() -> None:
    """Found by review: anyone who may write the ConfigMap could make the operator inflate
    a megabyte into gigabytes at every start."""
    bomb = base64.b64encode(gzip.compress(b"0" * (kept.UNPACKED_MAX_BYTES + 1))).decode()
    data = kept.kept_data(None, {kept.PACKED_KEY: bomb})
    assert data[kept.TABLE_KEY] == "a packed table past 16 MiB"
    with pytest.raises(kept.KeptTableInvalid, match="unreadable"):
        kept.resumable(data, "clicks", consumer_spec(), NOW)
    assert kept.kept_data(None, {kept.PACKED_KEY: "not base64!"})[kept.TABLE_KEY].startswith(
        "not a gzipped table"
    )
