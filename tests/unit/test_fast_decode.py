"""GetRecords answers decoded fast (`sources/fast_decode.py`) give exactly the records and
read results botocore's own parser gives: captured answers are read through a client
that leaves them to botocore and through one of ours, and every field of every Record
(those left out of its equality too) and of the ReadResult must agree. Each test also
requires the answer to have taken the path it is about, so a fast path that silently
fell back could not pass."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import fields
from decimal import Decimal
from typing import Any

import pytest

from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult, ShardReader
from streamconsumer.sources.dynamodb_streams import DynamoDBStreamsShardReader
from streamconsumer.sources.fast_decode import DECODES, PAGES, fast_get_records
from streamconsumer.sources.kinesis import KinesisShardReader, StreamRef

from .captured_answers import (
    KINESIS_ANSWERS,
    STREAMS_ANSWERS,
    Canned,
    botocore_client,
    fast_client,
    kinesis_record,
    stream_record,
)
from .dynamodb_changes import ARN, NOW, S1
from .reader_kinds import KINDS, TRIM_HORIZON, ReaderKind
from .throttling_endpoint import ThrottlingEndpoint


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


@pytest.fixture(params=["UTC", "XST+03:30"], ids=["utc", "local-zone-west-of-utc"])
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """botocore gives timestamps in the process's local zone, the fast path in UTC: the
    records must not differ for it (a POSIX TZ string: no tz database needed)."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def every_field(result: ReadResult) -> tuple[Any, ...]:
    records = [tuple(getattr(r, f.name) for f in fields(Record)) for r in result.records]
    return records, result.millis_behind_latest, result.shard_end, result.child_shards


def kinesis_reader(client: Any) -> ShardReader:
    return KinesisShardReader(client, StreamRef(name="s"), "shardId-000000000000", TRIM_HORIZON)


def streams_reader(client: Any) -> ShardReader:
    return DynamoDBStreamsShardReader(client, lambda: ARN, S1, TRIM_HORIZON, now=NOW.timestamp)


def page(client: Any) -> dict[str, Any]:
    """GetRecords' answer as the client returns it, less the HTTP metadata."""
    answer: dict[str, Any] = client.get_records(ShardIterator="it-1")
    del answer["ResponseMetadata"]
    return answer


def read_both(service: str, answer: dict[str, Any]) -> tuple[ReadResult, ReadResult]:
    """`answer` read through botocore's parser and through ours (which must have decoded
    it fast), as a ReadResult each (botocore's first); their pages must be equal too."""
    body = json.dumps(answer).encode()
    reader = kinesis_reader if service == "kinesis" else streams_reader
    slow, fast = botocore_client(service), fast_client(service)
    fast_get_records(fast)  # once more: still one handler
    Canned(slow, (200, body), (200, body))
    Canned(fast, (200, body), (200, body))
    # What botocore's parser is left with, seen by a handler that runs after ours.
    parsed: list[bytes] = []
    event = f"before-parse.{fast.meta.service_model.service_id.hyphenize()}.GetRecords"
    fast.meta.events.register(
        event, lambda response_dict, **_: parsed.append(response_dict["body"])
    )
    decodes = DECODES[service]
    before = decodes.fast, decodes.fallbacks
    expected = reader(slow).read()
    got = reader(fast).read()
    assert page(fast) == page(slow)
    assert (decodes.fast, decodes.fallbacks) == (before[0] + 2, before[1]), "decoded fast, once"
    assert parsed == [b"{}", b"{}"], "botocore's parser walked no records"
    return expected, got


@pytest.mark.parametrize("answer", KINESIS_ANSWERS.values(), ids=KINESIS_ANSWERS)
@pytest.mark.usefixtures("local_zone")
def test_kinesis_answers_give_botocores_records(answer: dict[str, Any]) -> None:
    expected, got = read_both("kinesis", answer)
    assert every_field(got) == every_field(expected)
    for record in got.records:
        assert record.approximate_arrival_timestamp is not None
        assert record.approximate_arrival_timestamp.utcoffset() is not None, "aware"


def test_the_captured_kinesis_answers_are_what_they_claim() -> None:
    """The cases above cover what they name: aggregates, child shards, an empty page."""
    _, aggregated = read_both("kinesis", KINESIS_ANSWERS["aggregated"])
    assert len(aggregated.records) == 9
    assert [r.sub_sequence_number for r in aggregated.records[1:8]] == list(range(7))
    assert aggregated.records[1].explicit_hash_key == str(2**127)
    _, ended = read_both("kinesis", KINESIS_ANSWERS["shard end"])
    assert ended.shard_end
    assert ended.child_shards == ("shardId-000000000001", "shardId-000000000002")
    _, empty = read_both("kinesis", KINESIS_ANSWERS["empty"])
    assert empty == ReadResult([], 0, at_tip=True)


@pytest.mark.parametrize("answer", STREAMS_ANSWERS.values(), ids=STREAMS_ANSWERS)
@pytest.mark.usefixtures("local_zone")
def test_dynamodb_answers_give_botocores_records(answer: dict[str, Any]) -> None:
    expected, got = read_both("dynamodbstreams", answer)
    assert every_field(got) == every_field(expected)
    assert [r.data for r in got.records] == [r.data for r in expected.records], "raw JSON too"


def test_every_attribute_type_is_decoded() -> None:
    _, got = read_both("dynamodbstreams", STREAMS_ANSWERS["changes"])
    insert, modify, remove, binary_key, keys_only = got.records
    assert [r.event_name for r in got.records] == ["INSERT", "MODIFY", "REMOVE", "INSERT", "INSERT"]
    image = insert.new_image
    assert image is not None
    assert image["blob"].value == b"\x00\xffbinary"
    assert {b.value for b in image["blobs"]} == {b"\x01", b"\x02\x03"}
    assert image["nested"]["list"][2]["deep"] == {b"\x04"}
    assert image["sizes"] == {Decimal("1"), Decimal("-2.5"), Decimal("1E+3")}
    assert (image["nothing"], image["yes"], image["no"]) == (None, True, False)
    assert modify.old_image == {"pk": "order#1", "sk": Decimal("12.50")}
    assert remove.old_image == image
    assert binary_key.keys is not None
    assert binary_key.keys["id"].value == b"\x00key"
    assert keys_only.new_image is None
    assert keys_only.approximate_arrival_timestamp is None


UNEXPECTED: dict[str, dict[str, dict[str, Any]]] = {
    "kinesis": {
        "a field we do not know": {
            "Records": [kinesis_record(1, b"a", NewField="?")],
            "NextShardIterator": "it",
        },
        "a null in a list": {
            "Records": [],
            "ChildShards": [
                {
                    "ShardId": "shardId-000000000001",
                    "ParentShards": [None],
                    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
                }
            ],
        },
        "a number as a string": {"Records": [], "MillisBehindLatest": "5"},
        "not base64": {"Records": [kinesis_record(1, b"a") | {"Data": "abc"}]},
    },
    "dynamodbstreams": {
        "two members in one value": {
            "Records": [stream_record(1, "INSERT", {"pk": {"S": "a", "N": "1"}})],
        },
        "a type we do not know": {"Records": [stream_record(1, "INSERT", {"pk": {"X": "a"}})]},
        "a boolean as a string": {
            "Records": [
                stream_record(1, "INSERT", {"pk": {"S": "a"}}, NewImage={"b": {"BOOL": "y"}})
            ]
        },
    },
}
CASES = [(service, body) for service, bodies in UNEXPECTED.items() for body in bodies.values()]


@pytest.mark.parametrize(
    ("service", "answer"),
    CASES,
    ids=[f"{service}: {name}" for service, bodies in UNEXPECTED.items() for name in bodies],
)
def test_an_unexpected_answer_is_left_to_botocore(service: str, answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()
    reader = kinesis_reader if service == "kinesis" else streams_reader
    slow, fast = botocore_client(service), fast_client(service)
    Canned(slow, (200, body))
    Canned(fast, (200, body))
    decodes = DECODES[service]
    before = decodes.fast, decodes.fallbacks
    try:
        expected: Any = every_field(reader(slow).read())
    except Exception as error:  # botocore may refuse it too: then ours must, alike
        expected = repr(error)
    try:
        got: Any = every_field(reader(fast).read())
    except Exception as error:
        got = repr(error)
    assert got == expected
    assert (decodes.fast, decodes.fallbacks) == (before[0], before[1] + 1), "left to botocore"


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def throttling(request: pytest.FixtureRequest) -> Iterator[ThrottlingEndpoint]:
    kind: ReaderKind = request.param
    endpoint = ThrottlingEndpoint(kind).start()
    yield endpoint
    endpoint.stop()


def test_a_throttled_read_is_still_retried_by_botocore(throttling: ThrottlingEndpoint) -> None:
    """The throttling answer (400) is botocore's to parse and retry; the answer after it
    is decoded fast."""
    kind = throttling.kind
    throttling.throttles = 2
    decodes = DECODES[kind.service]
    before = decodes.fast, decodes.fallbacks
    reader = kind.reader(kind.http_client(throttling.url, max_attempts=3), TRIM_HORIZON)
    assert [r.sequence_number for r in reader.read().records] == [kind.sequence(1)]
    assert throttling.calls == ["GetShardIterator"] + ["GetRecords"] * 3
    assert (decodes.fast, decodes.fallbacks) == (before[0] + 1, before[1])


def test_a_fault_of_the_fast_path_costs_speed_not_records(monkeypatch: pytest.MonkeyPatch) -> None:
    def faulty(_: Any) -> Any:
        raise RuntimeError("a bug of ours")

    monkeypatch.setitem(PAGES, "kinesis", faulty)
    body = json.dumps(KINESIS_ANSWERS["plain"]).encode()
    slow, fast = botocore_client("kinesis"), fast_client("kinesis")
    Canned(slow, (200, body))
    Canned(fast, (200, body))
    fallbacks = DECODES["kinesis"].fallbacks
    assert every_field(kinesis_reader(fast).read()) == every_field(kinesis_reader(slow).read())
    assert DECODES["kinesis"].fallbacks == fallbacks + 1
