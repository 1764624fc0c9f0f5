"""When each GetRecords reader renews its shard iterator, and how often: Kinesis opens a
fresh one on every expired iterator, as often as it comes; DynamoDB Streams on an
expired or trimmed one, once a read. Any other error drops the iterator and reaches the
caller, and the next read opens a fresh one right after the last record read. botocore's
Stubber at the boto3 boundary checks every call's parameters."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.dynamodb_streams import DynamoDBStreamsShardReader
from streamconsumer.sources.kinesis import KinesisShardReader, StreamRef

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)
EXPIRED = "ExpiredIteratorException"
TRIMMED = "TrimmedDataAccessException"
KINESIS_SHARD = "shardId-0"
TABLE_SHARD = "shardId-00000000000000000001-11111111"
ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"


def client(service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]  # one of two services, by name
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )


# --- Kinesis ------------------------------------------------------------------------------


def kinesis_record(sequence: str) -> dict[str, Any]:
    return {"SequenceNumber": sequence, "Data": b"x", "PartitionKey": "k"}


def kinesis_iterator_after(stubber: Stubber, sequence: str, iterator: str) -> None:
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": iterator},
        expected_params={
            "StreamName": "s",
            "ShardId": KINESIS_SHARD,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "StartingSequenceNumber": sequence,
        },
    )


def kinesis_reader(kinesis: Any) -> KinesisShardReader:
    return KinesisShardReader(kinesis, StreamRef(name="s"), KINESIS_SHARD, TRIM_HORIZON)


def test_kinesis_renews_an_expired_iterator_once_a_read() -> None:
    """A second expiry within one read reaches the caller (who pauses the shard), so a
    service that kept refusing fresh iterators cannot spin the reader; the next read has
    its one renewal again."""
    kinesis = client("kinesis")
    stubber = Stubber(kinesis)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response(
        "get_records", {"Records": [kinesis_record("10")], "NextShardIterator": "it-2"}
    )
    for renewal in range(3):
        stubber.add_client_error("get_records", EXPIRED)
        kinesis_iterator_after(stubber, "10", f"fresh-{renewal}")
    stubber.add_response(
        "get_records",
        {"Records": [kinesis_record("11")], "NextShardIterator": "it-3"},
        expected_params={"ShardIterator": "fresh-2", "Limit": 1000},
    )
    reader = kinesis_reader(kinesis)
    with stubber:
        assert [r.sequence_number for r in reader.read().records] == ["10"]
        with pytest.raises(ClientError, match=EXPIRED):
            reader.read()  # expired, renewed, expired again
        assert [r.sequence_number for r in reader.read().records] == ["11"]
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize("code", [TRIMMED, "InternalFailure"])
def test_kinesis_renews_on_no_other_error_and_reads_on_after_the_last_record(
    code: str,
) -> None:
    kinesis = client("kinesis")
    stubber = Stubber(kinesis)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response(
        "get_records", {"Records": [kinesis_record("10")], "NextShardIterator": "it-2"}
    )
    stubber.add_client_error("get_records", code)
    kinesis_iterator_after(stubber, "10", "it-3")  # the next read: a fresh iterator
    stubber.add_response(
        "get_records", {"Records": [kinesis_record("11")], "NextShardIterator": "it-4"}
    )
    reader = kinesis_reader(kinesis)
    with stubber:
        assert [r.sequence_number for r in reader.read().records] == ["10"]
        with pytest.raises(ClientError, match=code):
            reader.read()
        assert [r.sequence_number for r in reader.read().records] == ["11"]
    stubber.assert_no_pending_responses()


def test_an_error_without_a_service_answer_keeps_the_iterator() -> None:
    """A call that got no answer (a connection error, past botocore's retries) says
    nothing against the iterator: the next read uses it again."""
    kinesis = client("kinesis")
    stubber = Stubber(kinesis)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response(
        "get_records",
        {"Records": [kinesis_record("10")], "NextShardIterator": "it-2"},
        expected_params={"ShardIterator": "it-1", "Limit": 1000},
    )
    unanswered = EndpointConnectionError(endpoint_url="http://kinesis")
    answer = kinesis.get_records
    calls = iter([unanswered])

    def get_records(**params: Any) -> Any:
        failure = next(calls, None)
        if failure is not None:
            raise failure
        return answer(**params)

    kinesis.get_records = get_records
    reader = kinesis_reader(kinesis)
    with stubber:
        with pytest.raises(EndpointConnectionError):
            reader.read()
        assert [r.sequence_number for r in reader.read().records] == ["10"]
    stubber.assert_no_pending_responses()


# --- DynamoDB Streams ---------------------------------------------------------------------


def q(number: int) -> str:
    """A sequence number as DynamoDB Streams writes them (21 digits or more)."""
    return f"{number:021d}"


def change(sequence: str) -> dict[str, Any]:
    return {
        "eventID": f"e{sequence}",
        "eventName": "INSERT",
        "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": sequence},
    }


def table_iterator_after(stubber: Stubber, sequence: str, iterator: str) -> None:
    stubber.add_response(
        "get_shard_iterator",
        {"ShardIterator": iterator},
        expected_params={
            "StreamArn": ARN,
            "ShardId": TABLE_SHARD,
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": sequence,
        },
    )


def table_reader(streams: Any) -> DynamoDBStreamsShardReader:
    return DynamoDBStreamsShardReader(streams, lambda: ARN, TABLE_SHARD, TRIM_HORIZON)


@pytest.mark.parametrize("code", [EXPIRED, TRIMMED])
def test_dynamodb_renews_an_expired_or_trimmed_iterator_once_a_read(code: str) -> None:
    """A second refusal within one read reaches the caller (who pauses the shard); the
    next read has its one renewal again."""
    streams = client("dynamodbstreams")
    stubber = Stubber(streams)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_response("get_records", {"Records": [change(q(100))], "NextShardIterator": "it-2"})
    stubber.add_client_error("get_records", code)
    table_iterator_after(stubber, q(100), "it-3")
    stubber.add_client_error("get_records", code)
    table_iterator_after(stubber, q(100), "it-4")  # the next read
    stubber.add_client_error("get_records", code)
    table_iterator_after(stubber, q(100), "it-5")  # its one renewal
    stubber.add_response(
        "get_records",
        {"Records": [change(q(101))], "NextShardIterator": "it-6"},
        expected_params={"ShardIterator": "it-5", "Limit": 1000},
    )
    reader = table_reader(streams)
    with stubber:
        assert [r.sequence_number for r in reader.read().records] == [q(100)]
        with pytest.raises(ClientError, match=code):
            reader.read()
        assert [r.sequence_number for r in reader.read().records] == [q(101)]
    stubber.assert_no_pending_responses()


def test_dynamodb_expired_then_trimmed_share_the_one_renewal() -> None:
    streams = client("dynamodbstreams")
    stubber = Stubber(streams)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_client_error("get_records", EXPIRED)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-2"})
    stubber.add_client_error("get_records", TRIMMED)
    with stubber, pytest.raises(ClientError, match=TRIMMED):
        table_reader(streams).read()
    stubber.assert_no_pending_responses()


def test_dynamodb_renews_on_no_other_error() -> None:
    streams = client("dynamodbstreams")
    stubber = Stubber(streams)
    stubber.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
    stubber.add_client_error("get_records", "LimitExceededException")
    with stubber, pytest.raises(ClientError, match="LimitExceeded"):
        table_reader(streams).read()
    stubber.assert_no_pending_responses()
