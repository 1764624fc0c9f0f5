"""What every polled shard reader does, Kinesis' and DynamoDB Streams' alike, where the
emulators cannot provoke it on demand: throttling is botocore's to retry (standard mode),
shown against a small HTTP endpoint that throttles, so the real retry loop runs; expired
iterators are the reader's own (botocore's Stubber at the boto3 boundary, which checks
every call's parameters against the service model). Each kind's own behaviour is in
test_kinesis_reader.py and test_dynamodb_streams.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from streamconsumer.models.api import StartPosition, StartPositionType

from .reader_kinds import KINDS, TRIM_HORIZON, ReaderKind
from .throttling_endpoint import ThrottlingEndpoint


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> ReaderKind:
    chosen: ReaderKind = request.param
    return chosen


@pytest.fixture
def throttling(kind: ReaderKind, monkeypatch: pytest.MonkeyPatch) -> Iterator[ThrottlingEndpoint]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    endpoint = ThrottlingEndpoint(kind).start()
    yield endpoint
    endpoint.stop()


def test_throttling_is_retried_by_botocore(
    kind: ReaderKind, throttling: ThrottlingEndpoint
) -> None:
    throttling.throttles = 1
    reader = kind.reader(kind.http_client(throttling.url, max_attempts=3), TRIM_HORIZON)
    assert [r.sequence_number for r in reader.read().records] == [kind.sequence(1)]
    assert throttling.calls == ["GetShardIterator", "GetRecords", "GetRecords"]


def test_throttling_beyond_the_retries_reaches_the_caller(
    kind: ReaderKind, throttling: ThrottlingEndpoint
) -> None:
    throttling.throttles = 5
    reader = kind.reader(kind.http_client(throttling.url, max_attempts=1), TRIM_HORIZON)
    with pytest.raises(ClientError, match=kind.throttling_error):
        reader.read()
    throttling.throttles = 0
    records = reader.read().records
    assert [r.sequence_number for r in records] == [kind.sequence(1)], "reads on after it"


def test_expired_iterator_resumes_after_the_last_record_read(kind: ReaderKind) -> None:
    client = kind.stubbed_client()
    stubber = Stubber(client)
    after_nine = kind.sequence(9)
    start = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=after_nine)
    kind.expect_iterator(stubber, "it-1", after=after_nine)
    stubber.add_response(
        "get_records",
        {"Records": [kind.record(10), kind.record(11)], "NextShardIterator": "it-2"},
        expected_params={"ShardIterator": "it-1", "Limit": 1000},
    )
    stubber.add_client_error("get_records", "ExpiredIteratorException")
    kind.expect_iterator(stubber, "it-3", after=kind.sequence(11))
    stubber.add_response("get_records", {"Records": [kind.record(12)]})  # no iterator: shard end
    reader = kind.reader(client, start)
    with stubber:
        first = reader.read()
        second = reader.read()
    read = [r.sequence_number for r in first.records + second.records]
    assert read == [kind.sequence(n) for n in (10, 11, 12)]
    assert second.shard_end
    assert reader.read().shard_end, "stays ended without calling the service again"
