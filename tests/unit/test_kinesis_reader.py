"""Reader behaviour the emulators cannot provoke on demand: throttling and expired
iterators. The boto3 boundary is stubbed (botocore's Stubber); the reader is real."""

from __future__ import annotations

import random

import boto3
from botocore.stub import Stubber

from streamconsumer.core.backoff import Backoff
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.kinesis import KinesisShardReader, StreamRef


def raw(sequence: str, data: bytes = b"x") -> dict[str, object]:
    return {"SequenceNumber": sequence, "Data": data, "PartitionKey": "k"}


def make_reader() -> tuple[KinesisShardReader, Stubber, list[float]]:
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    sleeps: list[float] = []
    reader = KinesisShardReader(
        client,
        StreamRef(name="s"),
        "shardId-0",
        StartPosition(type=StartPositionType.TRIM_HORIZON),
        backoff=Backoff(base=0.1, cap=1.0, rng=random.Random(7)),
        sleep=sleeps.append,
    )
    return reader, stubber, sleeps


def test_throttling_backs_off_with_growing_jittered_delays() -> None:
    reader, stubber, sleeps = make_reader()
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    for _ in range(4):
        stubber.add_client_error("get_records", "ProvisionedThroughputExceededException")
    stubber.add_response(
        "get_records", {"Records": [raw("1")], "NextShardIterator": "it-2", "MillisBehindLatest": 5}
    )
    with stubber:
        result = reader.read()
    assert [r.sequence_number for r in result.records] == ["1"]
    assert len(sleeps) == 4
    assert all(0 <= delay <= min(1.0, 0.1 * 2**i) for i, delay in enumerate(sleeps))


def test_expired_iterator_resumes_after_the_last_record_read() -> None:
    reader, stubber, _ = make_reader()
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response(
        "get_records", {"Records": [raw("10"), raw("11")], "NextShardIterator": "it-2"}
    )
    stubber.add_client_error("get_records", "ExpiredIteratorException")
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": "it-3"},
        expected_params={
            "StreamName": "s",
            "ShardId": "shardId-0",
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "StartingSequenceNumber": "11",
        },
    )
    stubber.add_response("get_records", {"Records": [raw("12")]})  # no iterator: shard end
    with stubber:
        first = reader.read()
        second = reader.read()
    assert [r.sequence_number for r in first.records + second.records] == ["10", "11", "12"]
    assert second.shard_end
    assert reader.read().shard_end, "stays ended without calling Kinesis again"
