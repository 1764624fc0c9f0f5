"""The Kinesis source on the faithful emulator: lineage through a split and a merge,
every start position, shard end with children, and KPL de-aggregation."""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import TYPE_CHECKING

import boto3
import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.aws import client_options
from streamconsumer.sources.base import ReadResult
from streamconsumer.sources.fast_decode import DECODES
from streamconsumer.sources.kinesis import (
    KinesisShardReader,
    KinesisSource,
    StreamRef,
    kinesis_client,
)
from testbed.kinesis import (
    REGION,
    KinesisEmulator,
    create_stream,
    delete_stream,
    merge_shards,
    put_records,
    split_shard_in_half,
)

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordOutputTypeDef

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)


def drain(reader: KinesisShardReader, limit: int = 50) -> tuple[list[Record], ReadResult]:
    """Reads until shard end, or until a read comes back empty."""
    records: list[Record] = []
    for _ in range(limit):
        result = reader.read()
        records.extend(result.records)
        if result.shard_end or not result.records:
            return records, result
    raise AssertionError("reader did not stop")


def test_listing_is_paginated_and_carries_lineage(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=4)
    source = KinesisSource(client, StreamRef(name=stream_name))
    first = source.list_shards()
    assert len(first) == 4
    assert all(not s.closed and not s.parents for s in first)

    split_shard_in_half(client, stream_name, first[0].id)
    merge_shards(client, stream_name, first[2].id, first[3].id)
    paged = source.list_shards(page_size=2)
    assert paged == source.list_shards(), "pages add up to the same listing"
    by_id = {s.id: s for s in paged}
    assert len(paged) == 4 + 2 + 1
    assert by_id[first[0].id].closed
    split_children = [s for s in paged if s.parents == (first[0].id,)]
    assert len(split_children) == 2
    merged = [s for s in paged if len(s.parents) == 2]
    assert len(merged) == 1
    assert set(merged[0].parents) == {first[2].id, first[3].id}
    low, high = (c.hash_range for c in sorted(split_children, key=lambda s: s.hash_range or (0, 0)))
    assert low is not None
    assert high is not None
    assert low[1] + 1 == high[0], "the children cover the parent's hash range"


def test_a_stream_created_again_under_its_name_is_another_incarnation(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=1)
    by_name = KinesisSource(client, StreamRef(name=stream_name))
    first = by_name.incarnation()
    assert first.startswith(f"arn:aws:kinesis:us-east-1:000000000000:stream/{stream_name} ")
    arn = first.split(" ")[0]
    assert KinesisSource(client, StreamRef(arn=arn)).incarnation() == first, "name or ARN"
    time.sleep(0.01)  # creation times in milliseconds
    delete_stream(client, stream_name)
    create_stream(client, stream_name, shards=1)
    again = by_name.incarnation()
    assert again.split(" ")[0] == arn, "Kinesis gives it the same ARN"
    assert again != first


def test_start_positions_and_resume_from_checkpoint(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=1)
    source = KinesisSource(client, StreamRef(name=stream_name), max_records=7)
    shard_id = source.list_shards()[0].id
    latest = source.open_reader(shard_id, StartPosition(type=StartPositionType.LATEST))
    assert latest.read().records == []

    put_records(client, stream_name, [("k", b"old-%d" % i) for i in range(20)])
    time.sleep(1.1)  # arrival timestamps have second resolution in places
    boundary = datetime.datetime.now(datetime.UTC)
    time.sleep(0.1)
    put_records(client, stream_name, [("k", b"new-%d" % i) for i in range(5)])

    everything, _ = drain(source.open_reader(shard_id, TRIM_HORIZON))
    assert [r.data for r in everything] == [b"old-%d" % i for i in range(20)] + [
        b"new-%d" % i for i in range(5)
    ]
    assert [r.position for r in everything] == sorted(r.position for r in everything)

    checkpoint = everything[9].sequence_number
    resume = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=checkpoint)
    resumed, _ = drain(source.open_reader(shard_id, resume))
    assert resumed == everything[10:], "resumes exactly after the checkpoint"

    at_time = StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=boundary)
    recent, _ = drain(source.open_reader(shard_id, at_time))
    assert [r.data for r in recent] == [b"new-%d" % i for i in range(5)]

    new_only, _ = drain(latest)
    assert [r.data for r in new_only] == [r.data for r in everything]
    assert latest.read().millis_behind_latest is not None


def test_reader_reaches_shard_end_with_children(kinesis: KinesisEmulator, stream_name: str) -> None:
    client = kinesis.new_stream(stream_name, shards=2)
    source = KinesisSource(client, StreamRef(name=stream_name))
    a, b = source.list_shards()
    put_records(client, stream_name, [(f"k{i}", b"%d" % i) for i in range(30)])
    merge_shards(client, stream_name, a.id, b.id)
    child = next(s for s in source.list_shards() if len(s.parents) == 2)
    for parent in (a, b):
        records, end = drain(source.open_reader(parent.id, TRIM_HORIZON))
        assert end.shard_end
        assert end.child_shards == (child.id,)
        assert records, "both parents got some of the 30 records"


def put_aggregate(client: KinesisClient, stream_name: str, parts: int) -> PutRecordOutputTypeDef:
    """A KPL aggregate of `parts` user records (`user-<i>`, `payload-<i>`), put whole."""
    aggregator = RecordAggregator()
    for i in range(parts):
        aggregator.add_user_record(f"user-{i}", b"payload-%d" % i)
    partition_key, _explicit_hash_key, data = aggregator.clear_and_get().get_contents()
    return client.put_record(StreamName=stream_name, PartitionKey=partition_key, Data=data)


def test_kpl_aggregated_records_are_unpacked(kinesis: KinesisEmulator, stream_name: str) -> None:
    client = kinesis.new_stream(stream_name, shards=1)
    put_records(client, stream_name, [("plain", b"before")])
    put_aggregate(client, stream_name, 5)
    put_records(client, stream_name, [("plain", b"after")])

    source = KinesisSource(client, StreamRef(name=stream_name))
    records, _ = drain(source.open_reader(source.list_shards()[0].id, TRIM_HORIZON))
    assert [r.data for r in records] == [b"before"] + [b"payload-%d" % i for i in range(5)] + [
        b"after"
    ]
    parts = records[1:6]
    assert [r.partition_key for r in parts] == [f"user-{i}" for i in range(5)]
    assert [r.sub_sequence_number for r in parts] == list(range(5))
    assert len({r.sequence_number for r in parts}) == 1
    # A checkpoint inside the aggregate stays on the record before it; only the last
    # part may store the aggregate's own sequence number.
    assert [r.checkpoint_sequence for r in parts[:-1]] == [records[0].sequence_number] * 4
    assert parts[-1].checkpoint_sequence == parts[-1].sequence_number


def test_a_kcl_checkpoint_inside_an_aggregate_is_told_from_one_at_its_end(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    """`aggregate_at` reads the record a KCL checkpoint names: how many user records it
    holds (KCL's sub-sequence number counts them) and when it arrived."""
    client = kinesis.new_stream(stream_name, shards=1)
    put_records(client, stream_name, [("plain", b"before")])
    aggregate = put_aggregate(client, stream_name, 5)
    source = KinesisSource(client, StreamRef(name=stream_name))
    shard = source.list_shards()[0].id
    plain = drain(source.open_reader(shard, TRIM_HORIZON))[0][0]

    parts, arrived = source.aggregate_at(shard, aggregate["SequenceNumber"])
    assert parts == 5
    assert abs((arrived - datetime.datetime.now(datetime.UTC)).total_seconds()) < 60
    assert source.aggregate_at(shard, plain.sequence_number)[0] == 1
    with pytest.raises(LookupError, match="holds no record"):
        source.aggregate_at(shard, str(int(aggregate["SequenceNumber"]) + 1))


def test_a_timestamp_ahead_of_the_stream_clock_reads_from_the_tip(
    kinesalite: KinesisEmulator, stream_name: str
) -> None:
    """LATEST starts at the consumer's creation time (AT_TIMESTAMP). If Kinesis' clock is
    behind ours, that instant is in its future and GetShardIterator refuses it (kinesalite
    words it as AWS does): nothing has arrived there yet, so the tip skips nothing."""
    client = kinesalite.new_stream(stream_name, shards=1)
    put_records(client, stream_name, [("k", b"before")])
    source = KinesisSource(client, StreamRef(name=stream_name))
    (shard,) = source.list_shards()
    ahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    reader = source.open_reader(
        shard.id, StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=ahead)
    )
    assert reader.read().records == []
    put_records(client, stream_name, [("k", b"after")])
    assert [r.data for r in reader.read().records] == [b"after"]


def test_the_emulators_answers_are_decoded_fast_into_botocores_records(
    kinesis: KinesisEmulator, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real answers over HTTP, plain and KPL-aggregated records: the worker's client
    decodes every one fast (none falls back), into what botocore's parser gives."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    create_stream(kinesis.client, stream_name, shards=1)
    aggregator = RecordAggregator()
    for i in range(3):
        aggregator.add_user_record(f"user-{i}", b"part-%d" % i)
    partition_key, _, data = aggregator.clear_and_get().get_contents()
    put_records(kinesis.client, stream_name, [("plain", b"\x00\xff"), ("plain", b"")])
    kinesis.client.put_record(StreamName=stream_name, PartitionKey=partition_key, Data=data)
    shard = KinesisSource(kinesis.client, StreamRef(name=stream_name)).list_shards()[0].id

    def read(client: KinesisClient) -> list[tuple[object, ...]]:
        records, _ = drain(
            KinesisShardReader(client, StreamRef(name=stream_name), shard, TRIM_HORIZON)
        )
        return [tuple(getattr(r, f.name) for f in dataclasses.fields(Record)) for r in records]

    decodes = DECODES["kinesis"]
    before = decodes.fast, decodes.fallbacks
    fast = read(kinesis_client(REGION, kinesis.endpoint_url))
    assert decodes.fast >= before[0] + 2, "the page of records and the empty one after it"
    assert decodes.fallbacks == before[1], "none left to botocore's parser"
    assert len(fast) == 5
    assert fast == read(boto3.client("kinesis", **client_options(REGION, kinesis.endpoint_url)))
