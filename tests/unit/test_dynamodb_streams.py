"""The DynamoDB Streams source where DynamoDB Local cannot go: shard lineage across
generations (DynamoDB Local keeps one shard per stream and never splits or rolls it
over), DescribeStream pagination, expired iterators, empty pages on an open shard,
throttling retried by botocore. botocore's Stubber at the boto3 boundary checks every
call's parameters against the service model; throttling runs against a small HTTP
endpoint so botocore's real retry loop runs. Real HTTP is in
tests/integration/test_dynamodb_streams_source.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import boto3
import pytest
from boto3.dynamodb.types import Binary
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError

from streamconsumer.core.lineage import assignable_shards, compact, expand
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.models.resource import Source, StreamConsumerSpec
from streamconsumer.sources.dynamodb_streams import (
    DynamoDBStreamsShardReader,
    DynamoDBStreamsSource,
    NoStreamError,
    ShardNotListed,
    TableStream,
    stream_arns,
    streams_client,
)
from streamconsumer.sources.factory import make_source, source_settings, spec_from_settings
from streamconsumer.sources.kinesis import KinesisSource
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.source import worker_source

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"
TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)
NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
S1 = "shardId-00000000000000000001-11111111"


def q(number: int) -> str:
    """A sequence number as DynamoDB Streams writes them (21 digits or more)."""
    return f"{number:021d}"


def shard_id(generation: int, tag: str) -> str:
    return f"shardId-{generation:020d}-{tag}"


def raw_shard(sid: str, parent: str | None = None, closed: bool = False) -> dict[str, Any]:
    sequences = {"StartingSequenceNumber": q(100)}
    if closed:
        sequences["EndingSequenceNumber"] = q(199)
    shard: dict[str, Any] = {"ShardId": sid, "SequenceNumberRange": sequences}
    if parent:
        shard["ParentShardId"] = parent
    return shard


def change(
    sequence: str,
    event: str = "INSERT",
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    created: datetime = NOW,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": created,
        "Keys": {"pk": {"S": "a"}, "sk": {"N": "1"}},
        "SequenceNumber": sequence,
        "SizeBytes": 10,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        body["NewImage"] = new
    if old is not None:
        body["OldImage"] = old
    return {
        "eventID": f"e{sequence}",
        "eventName": event,
        "eventSource": "aws:dynamodb",
        "dynamodb": body,
    }


def stubbed(service: str = "dynamodbstreams") -> Any:
    client: Any = boto3.client(
        service,  # type: ignore[call-overload]  # one of two services, by name
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    return client


# --- lineage ------------------------------------------------------------------------------


def test_describe_stream_pages_and_lineage_across_generations() -> None:
    """Three generations over three pages: a partition's shard rolls over (one child),
    another splits (two children, each naming the one parent); closed shards are listed
    with their ending sequence. Parents come first, whatever the page order."""
    a0, b0 = shard_id(1, "aaaa0000"), shard_id(1, "bbbb0000")
    a1 = shard_id(2, "aaaa1111")  # a0 rolled over
    b1, b2 = shard_id(2, "bbbb1111"), shard_id(2, "bbbb2222")  # b0 split
    a2 = shard_id(3, "aaaa2222")  # a1 rolled over; still open
    client = stubbed()
    stubber = Stubber(client)
    pages = [
        ([raw_shard(a0, closed=True), raw_shard(b0, closed=True)], b0),
        ([raw_shard(a1, a0, closed=True), raw_shard(b1, b0)], b1),
        ([raw_shard(b2, b0), raw_shard(a2, a1)], None),
    ]
    start: str | None = None
    for shards, last in pages:
        expected: dict[str, Any] = {"StreamArn": ARN, "Limit": 2}
        if start:
            expected["ExclusiveStartShardId"] = start
        description: dict[str, Any] = {
            "StreamArn": ARN,
            "StreamStatus": "ENABLED",
            "Shards": shards,
        }
        if last:
            description["LastEvaluatedShardId"] = last
        stubber.add_response(
            "describe_stream", {"StreamDescription": description}, expected_params=expected
        )
        start = last
    with stubber:
        listed = DynamoDBStreamsSource(client, TableStream(arn=ARN)).list_shards(page_size=2)
    stubber.assert_no_pending_responses()
    by_id = {s.id: s for s in listed}
    assert [s.id for s in listed] == [a0, b0, a1, b1, b2, a2]
    assert by_id[a2].parents == (a1,)
    assert not by_id[a2].closed
    assert by_id[b1].parents == by_id[b2].parents == (b0,)
    assert by_id[a0].closed
    assert by_id[a0].sequence_range == (q(100), q(199))

    # Parents first (docs/design.md#parents-first), generation by generation.
    assert assignable_shards(listed, set()) == [a0, b0]
    assert assignable_shards(listed, {a0}) == [b0, a1]
    assert assignable_shards(listed, {a0, b0}) == [a1, b1, b2]
    assert assignable_shards(listed, {a0, b0, a1}) == [b1, b2, a2]
    # Past retention the oldest generation is gone: its children are assignable.
    assert assignable_shards([by_id[a1], by_id[a2]], set()) == [a1]
    # A finished set of DynamoDB shard ids survives compaction
    # (docs/design.md#lineage-is-remembered).
    finished = {a0, b0, a1}
    assert expand(compact(finished)) == finished


# --- records ------------------------------------------------------------------------------


def test_records_carry_event_names_keys_and_images_as_python_values() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-1"},
        expected_params={"StreamArn": ARN, "ShardId": S1, "ShardIteratorType": "TRIM_HORIZON"},
    )
    new = {
        "pk": {"S": "a"},
        "sk": {"N": "1"},
        "price": {"N": "12.50"},
        "tags": {"SS": ["x", "y"]},
        "blob": {"B": b"\x00\x01"},
        "meta": {"M": {"ok": {"BOOL": True}, "none": {"NULL": True}}},
        "list": {"L": [{"N": "1"}, {"S": "two"}]},
    }
    stubber.add_response(
        "get_records",
        {
            "Records": [
                change(q(101), "INSERT", new=new),
                change(q(102), "MODIFY", new={"pk": {"S": "a"}}, old=new),
                change(q(103), "REMOVE", old={"pk": {"S": "a"}}),
            ],
            "NextShardIterator": "it-2",
        },
    )
    reader = DynamoDBStreamsShardReader(
        client, lambda: ARN, S1, TRIM_HORIZON, now=lambda: NOW.timestamp() + 2.5
    )
    with stubber:
        result = reader.read()
    insert, modify, remove = result.records
    assert [r.event_name for r in result.records] == ["INSERT", "MODIFY", "REMOVE"]
    assert [r.sequence_number for r in result.records] == [q(101), q(102), q(103)]
    assert insert.keys == {"pk": "a", "sk": Decimal(1)}
    assert insert.new_image == {
        "pk": "a",
        "sk": Decimal(1),
        "price": Decimal("12.50"),
        "tags": {"x", "y"},
        "blob": Binary(b"\x00\x01"),
        "meta": {"ok": True, "none": None},
        "list": [Decimal(1), "two"],
    }
    assert insert.old_image is None
    assert modify.old_image == insert.new_image
    assert modify.new_image == {"pk": "a"}
    assert remove.new_image is None
    assert remove.old_image == {"pk": "a"}
    assert insert.approximate_arrival_timestamp == NOW
    assert len({r.partition_key for r in result.records}) == 1, "one item, one key"
    assert json.loads(insert.data)["dynamodb"]["NewImage"]["price"] == {"N": "12.50"}
    assert insert.checkpoint_sequence == q(101)
    assert result.millis_behind_latest == 2500, "lag from the newest record's creation time"
    assert not result.shard_end


def test_a_closed_shard_ends_when_no_next_iterator_comes() -> None:
    """DynamoDB Streams gives no ChildShards: the end is the missing NextShardIterator."""
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "it-2"})
    stubber.add_response("get_records", {"Records": [change(q(101))]})
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    with stubber:
        empty = reader.read()
        last = reader.read()
    assert empty.records == []
    assert not empty.shard_end, "an empty page is not the end"
    assert empty.millis_behind_latest == 0
    assert [r.sequence_number for r in last.records] == [q(101)]
    assert last.shard_end
    assert last.child_shards == ()
    assert reader.read().shard_end, "stays ended without another call"


def test_expired_iterator_resumes_after_the_last_record_read() -> None:
    client = stubbed()
    stubber = Stubber(client)
    start = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=q(100))
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-1"},
        expected_params={
            "StreamArn": ARN,
            "ShardId": S1,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": q(100),
        },
    )
    stubber.add_response(
        "get_records",
        {"Records": [change(q(101)), change(q(102))], "NextShardIterator": "it-2"},
        expected_params={"ShardIterator": "it-1", "Limit": 1000},
    )
    stubber.add_client_error("get_records", "ExpiredIteratorException")
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-3"},
        expected_params={
            "StreamArn": ARN,
            "ShardId": S1,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": q(102),
        },
    )
    stubber.add_response("get_records", {"Records": [change(q(103))], "NextShardIterator": "it-4"})
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, start, max_records=5000)
    with stubber:
        first, second = reader.read(), reader.read()
    assert [r.sequence_number for r in first.records + second.records] == [q(101), q(102), q(103)]


def test_a_position_past_retention_resumes_at_the_trim_horizon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DynamoDB Streams refuses an iterator (or a read) into trimmed data; those records
    are gone for everyone: resume at the oldest one left, with a warning."""
    client = stubbed()
    stubber = Stubber(client)
    start = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=q(100))
    stubber.add_client_error("get_shard_iterator", "TrimmedDataAccessException")
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-1"},
        expected_params={"StreamArn": ARN, "ShardId": S1, "ShardIteratorType": "TRIM_HORIZON"},
    )
    stubber.add_response("get_records", {"Records": [change(q(500))], "NextShardIterator": "it-2"})
    stubber.add_client_error("get_records", "TrimmedDataAccessException")  # trimmed under us
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-3"},
        expected_params={
            "StreamArn": ARN,
            "ShardId": S1,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": q(500),
        },
    )
    stubber.add_response("get_records", {"Records": [change(q(501))], "NextShardIterator": "it-4"})
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, start)
    with stubber, caplog.at_level("WARNING"):
        first, second = reader.read(), reader.read()
    assert [r.sequence_number for r in first.records + second.records] == [q(500), q(501)]
    assert "past the stream's retention" in caplog.text
    stubber.assert_no_pending_responses()


def test_a_trimmed_horizon_is_not_retried_forever() -> None:
    client = stubbed()
    stubber = Stubber(client)
    for _ in range(2):  # one fresh try, then the caller pauses the shard and calls again
        stubber.add_client_error("get_shard_iterator", "TrimmedDataAccessException")
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    with stubber, pytest.raises(ClientError, match="TrimmedDataAccess"):
        reader.read()
    stubber.assert_no_pending_responses()


def test_other_errors_reach_the_caller_and_reading_resumes_after_them() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": [change(q(101))], "NextShardIterator": "it-2"})
    stubber.add_client_error("get_records", "InternalServerError", http_status_code=500)
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-3"},
        expected_params={
            "StreamArn": ARN,
            "ShardId": S1,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": q(101),
        },
    )
    stubber.add_response("get_records", {"Records": [change(q(102))], "NextShardIterator": "it-4"})
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    with stubber:
        assert [r.sequence_number for r in reader.read().records] == [q(101)]
        with pytest.raises(ClientError, match="InternalServerError"):
            reader.read()
        assert [r.sequence_number for r in reader.read().records] == [q(102)]


def test_an_at_timestamp_start_reads_from_the_trim_horizon_leaving_out_older_records() -> None:
    """No AT_TIMESTAMP iterator in DynamoDB Streams: read from TRIM_HORIZON and leave out
    what was surely created before the start's minute (creation times are rounded down),
    then keep everything from the first record kept."""
    client = stubbed()
    stubber = Stubber(client)
    at = StartPosition(
        type=StartPositionType.AT_TIMESTAMP, timestamp=datetime(2026, 11, 1, 12, 0, 40, tzinfo=UTC)
    )
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-1"},
        expected_params={"StreamArn": ARN, "ShardId": S1, "ShardIteratorType": "TRIM_HORIZON"},
    )
    older = datetime(2026, 11, 1, 11, 59, 0, tzinfo=UTC)
    same_minute = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)  # maybe after 12:00:40
    stubber.add_response(
        "get_records",
        {
            "Records": [change(q(101), created=older), change(q(102), created=older)],
            "NextShardIterator": "it-2",
        },
    )
    stubber.add_response(
        "get_records",
        {
            "Records": [
                change(q(103), created=older),
                change(q(104), created=same_minute),
                change(q(105), created=older),  # after a kept one: kept (stream order)
            ],
            "NextShardIterator": "it-3",
        },
    )
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, at)
    with stubber:
        first, second = reader.read(), reader.read()
    assert first.records == []
    assert not first.shard_end
    assert [r.sequence_number for r in second.records] == [q(104), q(105)]


# --- backlog ------------------------------------------------------------------------------


def test_backlog_walks_empty_pages_to_the_first_waiting_record() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "it-2"})
    created = datetime(2026, 11, 1, 11, 59, 0, tzinfo=UTC)
    stubber.add_response(
        "get_records", {"Records": [change(q(150), created=created)], "NextShardIterator": "it-3"}
    )
    source = DynamoDBStreamsSource(client, TableStream(arn=ARN), now=lambda: NOW.timestamp())
    with stubber:
        assert source.backlog(S1, TRIM_HORIZON) == 60_000


def test_backlog_of_a_caught_up_open_shard_is_none() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    for n in range(3):
        stubber.add_response("get_records", {"Records": [], "NextShardIterator": f"it-{n + 2}"})
    with stubber:
        assert DynamoDBStreamsSource(client, TableStream(arn=ARN)).backlog(S1, TRIM_HORIZON) is None
    stubber.assert_no_pending_responses()


def test_backlog_of_a_closed_shard_at_its_end_is_its_childrens() -> None:
    """No ChildShards in DynamoDB Streams: the children are the listed shards naming it."""
    parent, child = shard_id(1, "aaaa0000"), shard_id(2, "aaaa1111")
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": []})  # the end
    stubber.add_response(
        "describe_stream",
        {
            "StreamDescription": {
                "Shards": [raw_shard(parent, closed=True), raw_shard(child, parent)],
            }
        },
    )
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-c"},
        expected_params={"StreamArn": ARN, "ShardId": child, "ShardIteratorType": "TRIM_HORIZON"},
    )
    created = datetime(2026, 11, 1, 11, 59, 50, tzinfo=UTC)
    stubber.add_response(
        "get_records", {"Records": [change(q(200), created=created)], "NextShardIterator": "it-d"}
    )
    source = DynamoDBStreamsSource(client, TableStream(arn=ARN), now=lambda: NOW.timestamp())
    with stubber:
        assert source.backlog(parent, TRIM_HORIZON) == 10_000


# --- table name -> stream -----------------------------------------------------------------


OLD_ARN = ARN
NEW_ARN = ARN.replace("2026-11-01T00:00:00.000", "2026-11-01T06:00:00.000")


def streams_of_orders(*arns: str) -> dict[str, Any]:
    """A ListStreams answer (DynamoDB lists the newest stream first)."""
    labels = [arn.rsplit("/", 1)[1] for arn in arns]
    streams = [
        {"StreamArn": arn, "TableName": "orders", "StreamLabel": label}
        for arn, label in zip(arns, labels, strict=True)
    ]
    return {"Streams": streams}


def describe(arn: str, *shards: dict[str, Any]) -> dict[str, Any]:
    status = "ENABLED" if arn == NEW_ARN else "DISABLED"
    return {"StreamDescription": {"StreamArn": arn, "StreamStatus": status, "Shards": list(shards)}}


def test_a_table_name_lists_every_stream_of_the_table_at_every_listing() -> None:
    """One stream, then the stream disabled and enabled again (a new StreamViewType):
    the next listing of the same source shows both, the old one's first; the new
    stream's first shard waits for every last shard of the old one (a rolled-over shard
    waits only through its child), and readers find each shard's own stream."""
    old_a0, old_a1, old_b0 = shard_id(1, "aaaa0000"), shard_id(2, "aaaa1111"), shard_id(1, "bb00")
    new_c0, new_c1 = shard_id(3, "cccc0000"), shard_id(4, "cccc1111")
    client = stubbed()
    stubber = Stubber(client)
    by_table = {"TableName": "orders"}
    stubber.add_response("list_streams", streams_of_orders(OLD_ARN), by_table)
    old_open = [raw_shard(old_a0, closed=True), raw_shard(old_a1, old_a0), raw_shard(old_b0)]
    stubber.add_response("describe_stream", describe(OLD_ARN, *old_open), {"StreamArn": OLD_ARN})
    stubber.add_response("list_streams", streams_of_orders(NEW_ARN, OLD_ARN), by_table)
    old_closed = [
        raw_shard(old_a0, closed=True),
        raw_shard(old_a1, old_a0, closed=True),
        raw_shard(old_b0, closed=True),
    ]
    stubber.add_response("describe_stream", describe(OLD_ARN, *old_closed), {"StreamArn": OLD_ARN})
    new = [raw_shard(new_c0, closed=True), raw_shard(new_c1, new_c0)]
    stubber.add_response("describe_stream", describe(NEW_ARN, *new), {"StreamArn": NEW_ARN})
    for shard, arn in ((old_b0, OLD_ARN), (new_c1, NEW_ARN)):
        stubber.add_response(
            "get_shard_iterator",
            {"ShardIterator": f"it-{shard}"},
            {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"},
        )
        stubber.add_response("get_records", {"Records": [], "NextShardIterator": "next"})
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    with stubber:
        before = source.list_shards()
        listed = source.list_shards()
        for shard in (old_b0, new_c1):
            source.open_reader(shard, TRIM_HORIZON).read()
    stubber.assert_no_pending_responses()
    assert [s.id for s in before] == [old_a0, old_a1, old_b0]
    assert [s.id for s in listed] == [old_a0, old_a1, old_b0, new_c0, new_c1]
    by_id = {s.id: s for s in listed}
    assert by_id[new_c0].waits_for == (old_a1, old_b0)
    assert by_id[new_c0].parents == ()
    assert by_id[new_c1].waits_for == (), "a child waits through its parent"
    assert by_id[old_a0].waits_for == ()
    assert assignable_shards(listed, set()) == [old_a0, old_b0]
    assert assignable_shards(listed, {old_a0, old_b0}) == [old_a1]
    assert assignable_shards(listed, {old_a0, old_a1, old_b0}) == [new_c0]
    # A day on the old stream is gone: the new one goes on by itself.
    assert assignable_shards([by_id[new_c0], by_id[new_c1]], set()) == [new_c0]


def test_a_worker_finds_the_stream_of_a_shard_it_was_given() -> None:
    """A worker's source has listed nothing: its first reader lists the table's streams
    once and reads from the one that lists the shard; later readers know it already."""
    old_a0, new_c0 = shard_id(1, "aaaa0000"), shard_id(3, "cccc0000")
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("list_streams", streams_of_orders(NEW_ARN, OLD_ARN))
    stubber.add_response("describe_stream", describe(OLD_ARN, raw_shard(old_a0, closed=True)))
    stubber.add_response("describe_stream", describe(NEW_ARN, raw_shard(new_c0)))
    for shard, arn in ((old_a0, OLD_ARN), (new_c0, NEW_ARN)):
        stubber.add_response(
            "get_shard_iterator",
            {"ShardIterator": f"it-{shard}"},
            {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"},
        )
        stubber.add_response("get_records", {"Records": [], "NextShardIterator": "next"})
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    with stubber:
        for shard in (old_a0, new_c0):
            source.open_reader(shard, TRIM_HORIZON).read()
    stubber.assert_no_pending_responses()


def test_a_shard_no_stream_lists_says_so() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("list_streams", streams_of_orders(OLD_ARN))
    stubber.add_response("describe_stream", describe(OLD_ARN, raw_shard(S1)))
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    gone = shard_id(9, "99999999")
    with stubber, pytest.raises(ShardNotListed, match="no stream of table orders lists it"):
        source.open_reader(gone, TRIM_HORIZON).read()


def test_a_shard_id_two_streams_list_is_refused() -> None:
    """Shard ids carry their creation time and a random part: never seen twice. Were
    one listed by two streams, the listing fails loudly rather than mix them up."""
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("list_streams", streams_of_orders(NEW_ARN, OLD_ARN))
    stubber.add_response("describe_stream", describe(OLD_ARN, raw_shard(S1, closed=True)))
    stubber.add_response("describe_stream", describe(NEW_ARN, raw_shard(S1)))
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    with stubber, pytest.raises(ValueError, match="listed by two streams"):
        source.list_shards()


def test_list_streams_pages() -> None:
    client = stubbed()
    stubber = Stubber(client)
    first = streams_of_orders(NEW_ARN)
    first["LastEvaluatedStreamArn"] = NEW_ARN
    stubber.add_response("list_streams", first, {"TableName": "orders"})
    stubber.add_response(
        "list_streams",
        streams_of_orders(OLD_ARN),
        {"TableName": "orders", "ExclusiveStartStreamArn": NEW_ARN},
    )
    with stubber:
        assert stream_arns(client, TableStream(table_name="orders")) == [OLD_ARN, NEW_ARN]


def test_a_table_without_a_stream_says_so() -> None:
    client = stubbed()
    stubber = Stubber(client)
    stubber.add_response("list_streams", {"Streams": []})
    with stubber, pytest.raises(NoStreamError, match="table orders has no stream"):
        DynamoDBStreamsSource(client, TableStream(table_name="orders")).list_shards()


def test_a_stream_needs_a_table_name_or_an_arn_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        TableStream()
    with pytest.raises(ValueError, match="not both"):
        TableStream(table_name="orders", arn=ARN)


# --- throttling (botocore's standard retries, over HTTP) ---------------------------------


class Throttling(BaseHTTPRequestHandler):
    """DynamoDB Streams' JSON protocol, just enough for one reader."""

    throttles: ClassVar[int] = 0
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        operation = self.headers["X-Amz-Target"].split(".")[-1]
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls.append(operation)
        if operation == "GetRecords" and type(self).throttles > 0:
            type(self).throttles -= 1
            self._answer(400, {"__type": "com.amazonaws.dynamodb.v20120810#LimitExceededException"})
        elif operation == "GetRecords":
            record = change(q(101), created=NOW)
            record["dynamodb"]["ApproximateCreationDateTime"] = NOW.timestamp()
            self._answer(200, {"Records": [record], "NextShardIterator": "it-2"})
        else:
            self._answer(200, {"ShardIterator": "it-1"})

    def _answer(self, status: int, body: dict[str, object]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def throttling_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Throttling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_throttling_is_retried_by_botocore_then_reaches_the_caller(
    throttling_endpoint: str,
) -> None:
    Throttling.throttles, Throttling.calls = 1, []
    client = streams_client("us-east-1", throttling_endpoint, max_attempts=3)
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    assert [r.sequence_number for r in reader.read().records] == [q(101)]
    assert Throttling.calls == ["GetShardIterator", "GetRecords", "GetRecords"]

    Throttling.throttles, Throttling.calls = 5, []
    client = streams_client("us-east-1", throttling_endpoint, max_attempts=1)
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    with pytest.raises(ClientError, match="LimitExceeded"):
        reader.read()


def test_clients_end_calls_in_seconds() -> None:
    config: Any = streams_client("us-east-1").meta.config  # botocore's Config is untyped
    assert config.read_timeout == 10.0
    assert config.connect_timeout == 5
    assert config.retries["mode"] == "standard"
    assert config.retries["total_max_attempts"] == 6  # botocore counts the first call too


# --- spec and factory ---------------------------------------------------------------------


def test_exactly_one_source() -> None:
    for bad in ({}, {"kinesis": {"streamName": "s"}, "dynamodbStreams": {"tableName": "orders"}}):
        with pytest.raises(ValidationError, match="set exactly one source"):
            Source.model_validate(bad)


def test_the_factory_and_the_worker_environment_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    spec = StreamConsumerSpec.model_validate(
        {
            "source": {
                "dynamodbStreams": {
                    "tableName": "orders",
                    "region": "eu-west-1",
                    "endpointURL": "http://127.0.0.1:1",
                }
            },
            "processor": {"image": "i", "entrypoint": "m:f"},
        }
    )
    settings = source_settings(spec.source)
    assert settings["source"] == "dynamodbStreams"
    assert settings["table_name"] == "orders"
    config = WorkerConfig.model_validate(
        {
            "operator_url": "http://op",
            "namespace": "n",
            "consumer": "c",
            "worker_name": "w",
            "token_path": "/t",
            "entrypoint": "m:f",
            **settings,
        }
    )
    for name, value in config.to_env().items():  # the pod's environment, read back
        monkeypatch.setenv(name, value)
    assert WorkerConfig.from_env() == config
    kind, table = spec_from_settings(config.model_dump())
    assert kind.name == "dynamodbStreams"
    assert table == spec.source.dynamodb_streams
    config = config.model_copy(update={"max_records": 10_000})
    source = worker_source(config)
    assert isinstance(source, DynamoDBStreamsSource)
    assert source.stream.table_name == "orders"
    assert source.client.meta.region_name == "eu-west-1"
    assert source.open_reader(S1, TRIM_HORIZON)._max_records == 1000, "GetRecords' limit"
    assert isinstance(make_source(spec.source), DynamoDBStreamsSource)

    kinesis = Source.model_validate({"kinesis": {"streamName": "s", "region": "eu-west-1"}})
    assert isinstance(make_source(kinesis), KinesisSource)
    assert source_settings(kinesis)["source"] == "kinesis"


def test_spark_batches_name_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """BatchInfo.stream for a table stream: the table's name, from its name or its ARN."""
    from streamconsumer.spark.batching import stream_from_environment

    for name in ("STREAMCONSUMER_STREAM_NAME", "STREAMCONSUMER_TABLE_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STREAMCONSUMER_STREAM_ARN", ARN)
    assert stream_from_environment() == "orders"
    monkeypatch.setenv("STREAMCONSUMER_TABLE_NAME", "orders-by-name")
    assert stream_from_environment() == "orders-by-name"
    monkeypatch.delenv("STREAMCONSUMER_TABLE_NAME")
    monkeypatch.setenv(
        "STREAMCONSUMER_STREAM_ARN", "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"
    )
    assert stream_from_environment() == "clicks"
