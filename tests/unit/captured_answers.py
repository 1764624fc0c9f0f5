"""GetRecords answers as Kinesis and DynamoDB Streams send them (JSON bodies), and clients
that are answered with them through botocore's `before-send` event: everything botocore
does after the network (parsing, the `before-parse` hook, retries) runs as it would."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
from aws_kinesis_agg.aggregator import RecordAggregator
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from streamconsumer.sources.aws import client_options
from streamconsumer.sources.dynamodb_streams import streams_client
from streamconsumer.sources.kinesis import kinesis_client

REGION = "us-east-1"
ENDPOINT = "http://canned.invalid"
ARRIVED = 1_795_953_600.123  # epoch seconds, with milliseconds as Kinesis writes them


def kinesis_sequence(number: int) -> str:
    return str(49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898 + number)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kinesis_record(number: int, data: bytes, key: str = "k", **extra: Any) -> dict[str, Any]:
    return {
        "SequenceNumber": kinesis_sequence(number),
        "ApproximateArrivalTimestamp": ARRIVED + number / 1000,
        "Data": b64(data),
        "PartitionKey": key,
        **extra,
    }


def aggregated(number: int, parts: int) -> dict[str, Any]:
    """A KPL aggregate of `parts` user records, two of them with explicit hash keys."""
    aggregator = RecordAggregator()
    for i in range(parts):
        hash_key = str(2**127 + i) if i % 3 == 0 else None
        aggregator.add_user_record(f"user-{i}", b"part-%d" % i, hash_key)
    key, _, data = aggregator.clear_and_get().get_contents()
    return kinesis_record(number, data, key)


KINESIS_ANSWERS: dict[str, dict[str, Any]] = {
    "plain": {
        "Records": [
            kinesis_record(1, b"hello"),
            kinesis_record(2, bytes(range(256)), "binary"),  # not UTF-8
            kinesis_record(3, b"", "empty", EncryptionType="KMS"),
            {**kinesis_record(4, b"x"), "ApproximateArrivalTimestamp": 1_795_953_600},
            # base64 with a line break: botocore's decoding is lenient, so is ours
            {**kinesis_record(5, b""), "Data": "aGVs\nbG8="},
        ],
        "NextShardIterator": "AAAAAAAAAAFcgJx1",
        "MillisBehindLatest": 86_400_000,
    },
    "aggregated": {
        "Records": [kinesis_record(1, b"before"), aggregated(2, 7), kinesis_record(3, b"after")],
        "NextShardIterator": "AAAAAAAAAAFcgJx2",
        "MillisBehindLatest": 0,
    },
    "shard end": {
        "Records": [kinesis_record(9, b"last")],
        "MillisBehindLatest": 0,
        "ChildShards": [
            {
                "ShardId": f"shardId-00000000000{n}",
                "ParentShards": ["shardId-000000000000"],
                "HashKeyRange": {"StartingHashKey": low, "EndingHashKey": high},
            }
            for n, (low, high) in enumerate(
                [("0", str(2**127 - 1)), (str(2**127), str(2**128 - 1))], start=1
            )
        ],
    },
    "empty": {"Records": [], "NextShardIterator": "AAAAAAAAAAFcgJx3", "MillisBehindLatest": 0},
    # kinesis-mock's way: members without a value sent as null (botocore leaves them out).
    "nulls": {
        "Records": [kinesis_record(1, b"a", EncryptionType=None)],
        "NextShardIterator": "AAAAAAAAAAFcgJx4",
        "MillisBehindLatest": 0,
        "ChildShards": None,
    },
}

# One of every attribute type, nested in maps and lists.
EVERY_TYPE: dict[str, Any] = {
    "pk": {"S": "order#1"},
    "sk": {"N": "12.50"},
    "blob": {"B": b64(b"\x00\xffbinary")},
    "tags": {"SS": ["a", "b"]},
    "sizes": {"NS": ["1", "-2.5", "1E+3"]},
    "blobs": {"BS": [b64(b"\x01"), b64(b"\x02\x03")]},
    "nothing": {"NULL": True},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "unicode": {"S": "naïve ☃ \u0000 end"},
    "nested": {
        "M": {
            "list": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"BS": [b64(b"\x04")]}}}]},
            "empty map": {"M": {}},
            "empty list": {"L": []},
            "flag": {"NULL": True},
        }
    },
}


def stream_record(
    number: int, event: str, keys: dict[str, Any], **images: dict[str, Any]
) -> dict[str, Any]:
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": 1_795_953_600 + number,
        "Keys": keys,
        "SequenceNumber": f"{number:021d}",
        "SizeBytes": 100 + number,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        **images,
    }
    return {
        "eventID": f"5f6e7d8c9b0a{number:04d}",
        "eventName": event,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": change,
    }


KEYS = {"pk": {"S": "order#1"}, "sk": {"N": "12.50"}}
BINARY_KEYS = {"id": {"B": b64(b"\x00key")}}
TTL_DELETE = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}

STREAMS_ANSWERS: dict[str, dict[str, Any]] = {
    "changes": {
        "Records": [
            stream_record(1, "INSERT", KEYS, NewImage=EVERY_TYPE),
            stream_record(2, "MODIFY", KEYS, NewImage=EVERY_TYPE, OldImage=KEYS),
            {**stream_record(3, "REMOVE", KEYS, OldImage=EVERY_TYPE), "userIdentity": TTL_DELETE},
            stream_record(4, "INSERT", BINARY_KEYS, NewImage=BINARY_KEYS),
            {
                **stream_record(5, "INSERT", KEYS),
                "dynamodb": {"Keys": KEYS, "SequenceNumber": "5" * 21},
            },
        ],
        "NextShardIterator": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x|1|AAAA",
    },
    "shard end": {"Records": [stream_record(6, "INSERT", KEYS, NewImage=KEYS)]},
    "empty": {"Records": [], "NextShardIterator": "arn:aws:dynamodb:us-east-1:1:table/t|2|BBBB"},
}


class _Body:
    """What botocore reads an HTTP body from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class Canned:
    """Answers a client's calls: GetShardIterator with an iterator, GetRecords with the
    queued (status, JSON body) answers in turn."""

    def __init__(self, client: Any, *answers: tuple[int, bytes]) -> None:
        self.answers = list(answers)
        client.meta.events.register("before-send", self)

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        target = request.headers["X-Amz-Target"]
        operation = (target.decode() if isinstance(target, bytes) else target).split(".")[-1]
        if operation == "GetRecords":
            status, body = self.answers.pop(0)
        else:
            status, body = 200, json.dumps({"ShardIterator": "it-1"}).encode()
        headers = HTTPHeaders()
        headers["x-amzn-RequestId"] = "canned"
        headers["Content-Length"] = str(len(body))
        return AWSResponse(request.url, status, headers, _Body(body))


def botocore_client(service: str) -> Any:
    """A client as ours are (`client_options`) that leaves GetRecords to botocore."""
    options = client_options(REGION, ENDPOINT)
    return boto3.client(service, **options)  # type: ignore[call-overload]


def fast_client(service: str) -> Any:
    """A client from our own factory: GetRecords decoded fast."""
    if service == "kinesis":
        return kinesis_client(REGION, ENDPOINT)
    return streams_client(REGION, ENDPOINT)
