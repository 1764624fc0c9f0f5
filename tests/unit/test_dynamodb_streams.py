"""The DynamoDB Streams source where DynamoDB Local cannot go: shard lineage across
generations (DynamoDB Local keeps one shard per stream and never splits or rolls it
over), DescribeStream pagination, trimmed data, empty pages on an open shard. botocore's
Stubber at the boto3 boundary checks every call's parameters against the service model.
What this reader shares with Kinesis' (throttling, expired iterators) is in
test_shard_readers.py; real HTTP is in tests/integration/test_dynamodb_streams_source.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError

from streamconsumer.core.lineage import assignable_shards, compact, expand
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.models.resource import Source
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
from streamconsumer.sources.registry import selected
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.source import worker_source
from testbed.specs import consumer_spec, worker_config

from .dynamodb_changes import ARN, NOW, S1, change, q
from .reader_kinds import DYNAMODB_STREAMS, TRIM_HORIZON


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


def expect_an_empty_read(stubber: Stubber, shard: str, arn: str) -> None:
    """A reader opened on `shard` of stream `arn` at the trim horizon reads once."""
    params = {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"}
    stubber.add_response("get_shard_iterator", {"ShardIterator": f"it-{shard}"}, params)
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "next"})


def backlog_at_now(client: Any, stubber: Stubber, shard: str) -> int | None:
    """The backlog of `shard` from its trim horizon, as the source sees it at NOW."""
    source = DynamoDBStreamsSource(client, TableStream(arn=ARN), now=NOW.timestamp)
    with stubber:
        return source.backlog(shard, TRIM_HORIZON)


# --- lineage ------------------------------------------------------------------------------


def test_describe_stream_pages_and_lineage_across_generations() -> None:
    """Three generations over three pages: a partition's shard rolls over (one child),
    another splits (two children, each naming the one parent); closed shards are listed
    with their ending sequence. Parents come first, whatever the page order."""
    a0, b0 = shard_id(1, "aaaa0000"), shard_id(1, "bbbb0000")
    a1 = shard_id(2, "aaaa1111")  # a0 rolled over
    b1, b2 = shard_id(2, "bbbb1111"), shard_id(2, "bbbb2222")  # b0 split
    a2 = shard_id(3, "aaaa2222")  # a1 rolled over; still open
    client = DYNAMODB_STREAMS.stubbed_client()
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
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
    client = DYNAMODB_STREAMS.stubbed_client()
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


def test_a_reader_asks_for_no_more_than_getrecords_allows() -> None:
    """GetRecords takes at most 1,000 records a call: a larger maxRecords is cut to it."""
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
    stubber.add_response(
        "get_records",
        {"Records": [change(q(101))], "NextShardIterator": "it-2"},
        expected_params={"ShardIterator": "it-1", "Limit": 1000},
    )
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON, max_records=5000)
    with stubber:
        assert [r.sequence_number for r in reader.read().records] == [q(101)]
    stubber.assert_no_pending_responses()


def test_a_position_past_retention_resumes_at_the_trim_horizon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DynamoDB Streams refuses an iterator (or a read) into trimmed data; those records
    are gone for everyone: resume at the oldest one left, with a warning."""
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    start = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=q(100))
    stubber.add_client_error("get_shard_iterator", "TrimmedDataAccessException")
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
    stubber.add_response("get_records", {"Records": [change(q(500))], "NextShardIterator": "it-2"})
    stubber.add_client_error("get_records", "TrimmedDataAccessException")  # trimmed under us
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-3", after=q(500))
    stubber.add_response("get_records", {"Records": [change(q(501))], "NextShardIterator": "it-4"})
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, start)
    with stubber, caplog.at_level("WARNING"):
        first, second = reader.read(), reader.read()
    assert [r.sequence_number for r in first.records + second.records] == [q(500), q(501)]
    assert "past the stream's retention" in caplog.text
    stubber.assert_no_pending_responses()


def test_a_trimmed_horizon_is_not_retried_forever() -> None:
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    for _ in range(2):  # one fresh try, then the caller pauses the shard and calls again
        stubber.add_client_error("get_shard_iterator", "TrimmedDataAccessException")
    reader = DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON)
    with stubber, pytest.raises(ClientError, match="TrimmedDataAccess"):
        reader.read()
    stubber.assert_no_pending_responses()


def test_other_errors_reach_the_caller_and_reading_resumes_after_them() -> None:
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": [change(q(101))], "NextShardIterator": "it-2"})
    stubber.add_client_error("get_records", "InternalServerError", http_status_code=500)
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-3", after=q(101))
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    at = StartPosition(
        type=StartPositionType.AT_TIMESTAMP, timestamp=datetime(2026, 11, 1, 12, 0, 40, tzinfo=UTC)
    )
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "it-2"})
    created = datetime(2026, 11, 1, 11, 59, 0, tzinfo=UTC)
    stubber.add_response(
        "get_records", {"Records": [change(q(150), created=created)], "NextShardIterator": "it-3"}
    )
    assert backlog_at_now(client, stubber, S1) == 60_000


def test_backlog_of_a_caught_up_open_shard_is_none() -> None:
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    DYNAMODB_STREAMS.expect_iterator(stubber, "it-1")
    for n in range(3):
        stubber.add_response("get_records", {"Records": [], "NextShardIterator": f"it-{n + 2}"})
    with stubber:
        assert DynamoDBStreamsSource(client, TableStream(arn=ARN)).backlog(S1, TRIM_HORIZON) is None
    stubber.assert_no_pending_responses()


def test_backlog_of_a_closed_shard_at_its_end_is_its_childrens() -> None:
    """No ChildShards in DynamoDB Streams: the children are the listed shards naming it."""
    parent, child = shard_id(1, "aaaa0000"), shard_id(2, "aaaa1111")
    client = DYNAMODB_STREAMS.stubbed_client()
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
    assert backlog_at_now(client, stubber, parent) == 10_000


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
    client = DYNAMODB_STREAMS.stubbed_client()
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
        expect_an_empty_read(stubber, shard, arn)
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    stubber.add_response("list_streams", streams_of_orders(NEW_ARN, OLD_ARN))
    stubber.add_response("describe_stream", describe(OLD_ARN, raw_shard(old_a0, closed=True)))
    stubber.add_response("describe_stream", describe(NEW_ARN, raw_shard(new_c0)))
    for shard, arn in ((old_a0, OLD_ARN), (new_c0, NEW_ARN)):
        expect_an_empty_read(stubber, shard, arn)
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    with stubber:
        for shard in (old_a0, new_c0):
            source.open_reader(shard, TRIM_HORIZON).read()
    stubber.assert_no_pending_responses()


def test_a_shard_no_stream_lists_says_so() -> None:
    client = DYNAMODB_STREAMS.stubbed_client()
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    stubber.add_response("list_streams", streams_of_orders(NEW_ARN, OLD_ARN))
    stubber.add_response("describe_stream", describe(OLD_ARN, raw_shard(S1, closed=True)))
    stubber.add_response("describe_stream", describe(NEW_ARN, raw_shard(S1)))
    source = DynamoDBStreamsSource(client, TableStream(table_name="orders"))
    with stubber, pytest.raises(ValueError, match="listed by two streams"):
        source.list_shards()


def test_list_streams_pages() -> None:
    client = DYNAMODB_STREAMS.stubbed_client()
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
    client = DYNAMODB_STREAMS.stubbed_client()
    stubber = Stubber(client)
    stubber.add_response("list_streams", {"Streams": []})
    with stubber, pytest.raises(NoStreamError, match="table orders has no stream"):
        DynamoDBStreamsSource(client, TableStream(table_name="orders")).list_shards()


def test_a_stream_needs_a_table_name_or_an_arn_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        TableStream()
    with pytest.raises(ValueError, match="not both"):
        TableStream(table_name="orders", arn=ARN)


# --- clients ---------------------------------------------------------------------------


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
    orders = {"tableName": "orders", "region": "eu-west-1", "endpointURL": "http://127.0.0.1:1"}
    spec = consumer_spec(source={"dynamodbStreams": orders})
    settings = source_settings(spec.source)
    assert settings["source"] == "dynamodbStreams"
    assert settings["table_name"] == "orders"
    config = worker_config(**settings)
    for name, value in config.to_env().items():  # the pod's environment, read back
        monkeypatch.setenv(name, value)
    assert WorkerConfig.from_env() == config
    kind, table = spec_from_settings(config.source, config.source_settings)
    assert kind.name == "dynamodbStreams"
    assert (kind, table) == selected(spec.source)
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
