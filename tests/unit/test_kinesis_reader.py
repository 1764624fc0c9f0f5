"""Reader behaviour the emulators cannot provoke on demand: throttling and expired
iterators. Throttling is botocore's to retry (standard mode): shown against a small
HTTP endpoint that throttles, so the real retry loop runs. Expired iterators are the
reader's own (botocore's Stubber at the boto3 boundary)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.kinesis import (
    KinesisShardReader,
    KinesisSource,
    StreamRef,
    kinesis_client,
)

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)
HASHES = {"StartingHashKey": "0", "EndingHashKey": "1"}


def raw(sequence: str, data: bytes = b"x") -> dict[str, object]:
    return {"SequenceNumber": sequence, "Data": data, "PartitionKey": "k"}


class Throttling(BaseHTTPRequestHandler):
    """Kinesis' JSON protocol, just enough for one reader: GetRecords is throttled
    `throttles` times, then answers one record."""

    throttles: ClassVar[int] = 0
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        operation = self.headers["X-Amz-Target"].split(".")[-1]
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls.append(operation)
        if operation == "GetRecords" and type(self).throttles > 0:
            type(self).throttles -= 1
            self._answer(400, {"__type": "ProvisionedThroughputExceededException"})
        elif operation == "GetRecords":
            record = {"SequenceNumber": "1", "PartitionKey": "k", "Data": base64.b64encode(b"x")}
            body = {"Records": [record], "NextShardIterator": "it-2", "MillisBehindLatest": 0}
            self._answer(200, body)
        else:
            self._answer(200, {"ShardIterator": "it-1"})

    def _answer(self, status: int, body: dict[str, object]) -> None:
        payload = json.dumps(body, default=lambda b: b.decode()).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
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


def reader_for(endpoint: str, max_attempts: int) -> KinesisShardReader:
    client = kinesis_client("us-east-1", endpoint, max_attempts=max_attempts)
    return KinesisShardReader(client, StreamRef(name="s"), "shardId-0", TRIM_HORIZON)


def test_throttling_is_retried_by_botocore(throttling_endpoint: str) -> None:
    Throttling.throttles, Throttling.calls = 1, []
    result = reader_for(throttling_endpoint, max_attempts=3).read()
    assert [r.sequence_number for r in result.records] == ["1"]
    assert Throttling.calls == ["GetShardIterator", "GetRecords", "GetRecords"]


def test_throttling_beyond_the_retries_reaches_the_caller(throttling_endpoint: str) -> None:
    Throttling.throttles, Throttling.calls = 5, []
    reader = reader_for(throttling_endpoint, max_attempts=1)
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        reader.read()
    Throttling.throttles = 0
    assert [r.sequence_number for r in reader.read().records] == ["1"], "reads on after it"


def test_expired_iterator_resumes_after_the_last_record_read() -> None:
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    reader = KinesisShardReader(client, StreamRef(name="s"), "shardId-0", TRIM_HORIZON)
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


def test_backlog_of_a_closed_shard_at_its_end_is_its_childrens() -> None:
    """An unfinished closed shard with nothing left still needs a worker, and its
    children's records wait behind it: the autoscaler must see that backlog."""
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    source = KinesisSource(client, StreamRef(name="s"))
    after = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number="9")
    stubber.add_response("get_shard_iterator", {"ShardIterator": "p"})
    stubber.add_response(
        "get_records",
        {
            "Records": [],
            "ChildShards": [
                {"ShardId": "c1", "ParentShards": ["s0"], "HashKeyRange": HASHES},
                {"ShardId": "c2", "ParentShards": ["s0"], "HashKeyRange": HASHES},
            ],
        },
    )
    stubber.add_response("get_shard_iterator", {"ShardIterator": "c1"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "c1-2"})
    stubber.add_response("get_shard_iterator", {"ShardIterator": "c2"})
    stubber.add_response(
        "get_records",
        {"Records": [raw("12")], "NextShardIterator": "c2-2", "MillisBehindLatest": 4000},
    )
    with stubber:
        assert source.backlog("s0", after) == 4000
    stubber = Stubber(client)
    source = KinesisSource(client, StreamRef(name="s"))
    stubber.add_response("get_shard_iterator", {"ShardIterator": "open"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "open-2"})
    with stubber:
        assert source.backlog("s1", after) is None, "open and caught up"
