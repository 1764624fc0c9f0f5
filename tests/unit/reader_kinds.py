"""The two polled stream kinds, Kinesis and DynamoDB Streams, described once so that one
suite (test_shard_readers.py) shows the behaviour their shard readers share: the API's
names and shapes differ, the reading does not."""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from typing import Any

import boto3
from botocore.stub import Stubber

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.base import ShardReader
from streamconsumer.sources.dynamodb_streams import DynamoDBStreamsShardReader, streams_client
from streamconsumer.sources.kinesis import KinesisShardReader, StreamRef, kinesis_client

from .dynamodb_changes import ARN, NOW, S1, change, q

STREAM = "s"
KINESIS_SHARD = "shardId-0"
TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)


class ReaderKind(ABC):
    name: str
    service: str
    throttling_error: str  # the error code botocore retries as throttling
    wire_error_type: str  # how the service writes that code in its JSON answer
    content_type: str

    def stubbed_client(self) -> Any:
        """A client for botocore's Stubber: it never calls out, so any keys do."""
        client: Any = boto3.client(
            self.service,  # type: ignore[call-overload]  # one of two services, by name
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        return client

    @abstractmethod
    def http_client(self, endpoint: str, max_attempts: int) -> Any: ...

    @abstractmethod
    def reader(self, client: Any, start: StartPosition) -> ShardReader: ...

    @abstractmethod
    def sequence(self, number: int) -> str:
        """The service's way of writing sequence number `number`."""

    @abstractmethod
    def record(self, number: int) -> dict[str, Any]:
        """A record as boto3 returns it."""

    @abstractmethod
    def wire_page(self, number: int) -> dict[str, object]:
        """A GetRecords answer of one record as the service sends it in JSON."""

    @abstractmethod
    def iterator_params(self, type_: str, sequence: str | None) -> dict[str, str]:
        """GetShardIterator's parameters for the one shard the readers here read."""

    def expect_iterator(self, stubber: Stubber, iterator: str, after: str | None = None) -> None:
        """One GetShardIterator call: at the trim horizon, or after sequence `after`."""
        type_ = "AFTER_SEQUENCE_NUMBER" if after else "TRIM_HORIZON"
        params = self.iterator_params(type_, after)
        stubber.add_response("get_shard_iterator", {"ShardIterator": iterator}, params)


class Kinesis(ReaderKind):
    name = "kinesis"
    service = "kinesis"
    throttling_error = wire_error_type = "ProvisionedThroughputExceededException"
    content_type = "application/x-amz-json-1.1"

    def http_client(self, endpoint: str, max_attempts: int) -> Any:
        return kinesis_client("us-east-1", endpoint, max_attempts=max_attempts)

    def reader(self, client: Any, start: StartPosition) -> ShardReader:
        return KinesisShardReader(client, StreamRef(name=STREAM), KINESIS_SHARD, start)

    def sequence(self, number: int) -> str:
        return str(number)

    def record(self, number: int) -> dict[str, Any]:
        return {"SequenceNumber": self.sequence(number), "Data": b"x", "PartitionKey": "k"}

    def wire_page(self, number: int) -> dict[str, object]:
        record = {**self.record(number), "Data": base64.b64encode(b"x").decode()}
        return {"Records": [record], "NextShardIterator": "it-2", "MillisBehindLatest": 0}

    def iterator_params(self, type_: str, sequence: str | None) -> dict[str, str]:
        params = {"StreamName": STREAM, "ShardId": KINESIS_SHARD, "ShardIteratorType": type_}
        return params | ({"StartingSequenceNumber": sequence} if sequence else {})


class DynamoDBStreams(ReaderKind):
    name = "dynamodbStreams"
    service = "dynamodbstreams"
    throttling_error = "LimitExceededException"
    wire_error_type = f"com.amazonaws.dynamodb.v20120810#{throttling_error}"
    content_type = "application/x-amz-json-1.0"

    def http_client(self, endpoint: str, max_attempts: int) -> Any:
        return streams_client("us-east-1", endpoint, max_attempts=max_attempts)

    def reader(self, client: Any, start: StartPosition) -> ShardReader:
        return DynamoDBStreamsShardReader(client, lambda: ARN, S1, start)

    def sequence(self, number: int) -> str:
        return q(number)

    def record(self, number: int) -> dict[str, Any]:
        return change(self.sequence(number))

    def wire_page(self, number: int) -> dict[str, object]:
        record = self.record(number)
        record["dynamodb"]["ApproximateCreationDateTime"] = NOW.timestamp()  # epoch seconds
        return {"Records": [record], "NextShardIterator": "it-2"}

    def iterator_params(self, type_: str, sequence: str | None) -> dict[str, str]:
        params = {"StreamArn": ARN, "ShardId": S1, "ShardIteratorType": type_}
        return params | ({"SequenceNumber": sequence} if sequence else {})


KINESIS = Kinesis()
DYNAMODB_STREAMS = DynamoDBStreams()
KINDS = (KINESIS, DYNAMODB_STREAMS)
