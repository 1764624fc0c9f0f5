"""Enhanced fan-out's pure parts and its subscription loop on a scripted client: where each
subscription starts, when it is renewed, shard end with children, back-off on
ResourceInUse / LimitExceeded, the consumer's name and registration, and the narrow
initial-response tolerance (checked against botocore's own decoder and parser)."""

from __future__ import annotations

import io
import json
import queue
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError
from botocore.parsers import create_parser

from streamconsumer.core.backoff import Backoff
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.base import ReadResult, SubscribedReader
from streamconsumer.sources.initial_response import (
    INITIAL_RESPONSE,
    encode_message,
    tolerate_missing_initial_response,
)
from streamconsumer.sources.kinesis import StreamRef
from streamconsumer.sources.kinesis_consumer import NAME_LIMIT, StreamConsumers, consumer_name
from streamconsumer.sources.kinesis_fanout import (
    ConsumerArn,
    End,
    FanOutShardReader,
    Pump,
    ReadSide,
    resubscribe_due,
    retried,
    shard_end,
    starting_position,
)

AFTER = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number="41")
WHEN = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def event(sequences: list[str], continuation: str | None, children: tuple[str, ...] = ()) -> Any:
    records = [
        {
            "Data": b"x",
            "PartitionKey": "k",
            "SequenceNumber": s,
            "ApproximateArrivalTimestamp": WHEN,
        }
        for s in sequences
    ]
    body: dict[str, Any] = {"Records": records, "MillisBehindLatest": 7}
    if continuation is not None:
        body["ContinuationSequenceNumber"] = continuation
    if children:
        body["ChildShards"] = [
            {"ShardId": c, "ParentShards": ["s"], "HashKeyRange": {}} for c in children
        ]
    return body


def client_error(code: str, operation: str = "SubscribeToShard") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


# --- positions, timing, errors, ends ------------------------------------------------------


def test_a_subscription_starts_where_the_polling_reader_would_then_after_the_continuation() -> None:
    assert starting_position(AFTER, None) == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "41",
    }
    horizon = StartPosition(type=StartPositionType.TRIM_HORIZON)
    assert starting_position(horizon, None) == {"Type": "TRIM_HORIZON"}
    at = StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=WHEN)
    assert starting_position(at, None) == {"Type": "AT_TIMESTAMP", "Timestamp": WHEN}
    for start in (AFTER, horizon, at):
        assert starting_position(start, "99") == {
            "Type": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": "99",
        }


def test_renewal_is_due_after_the_interval() -> None:
    assert not resubscribe_due(100.0, 379.9, 280.0)
    assert resubscribe_due(100.0, 380.0, 280.0)


def test_only_in_use_and_limits_are_waited_out() -> None:
    assert retried(client_error("ResourceInUseException"))
    assert retried(client_error("LimitExceededException"))
    assert not retried(client_error("ResourceNotFoundException"))
    assert not retried(client_error("AccessDeniedException"))


def test_shard_end_is_the_event_without_continuation() -> None:
    assert shard_end(event(["1"], "1")) is None
    assert shard_end(event([], None, ("c1", "c2"))) == End(("c1", "c2"))
    assert shard_end(event([], None)) == End(()), "children expired from the stream too"


def test_read_side_ends_as_the_polling_reader_does() -> None:
    side = ReadSide(previous="41")
    first = side.event(event(["42", "43"], "43"))
    assert [r.sequence_number for r in first.records] == ["42", "43"]
    assert first.millis_behind_latest == 7
    assert not first.shard_end
    assert side.idle() == ReadResult([], 7)
    last = side.event(event(["44"], None, ("c1", "c2")))
    assert [r.sequence_number for r in last.records] == ["44"]
    assert (last.shard_end, last.child_shards, last.millis_behind_latest) == (True, ("c1", "c2"), 0)
    assert side.ended == ReadResult([], 0, shard_end=True, child_shards=("c1", "c2"))


# --- the subscription loop on a scripted client ---------------------------------------------


class ScriptedStream:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        for body in self.events:
            yield {"SubscribeToShardEvent": body}

    def close(self) -> None:
        self.closed = True


class ScriptedClient:
    """SubscribeToShard answers in order (a list of events, or an error to raise);
    GetRecords says the shard is open."""

    def __init__(self, answers: list[list[Any] | ClientError]) -> None:
        self.answers = answers
        self.positions: list[dict[str, Any]] = []
        self.streams: list[ScriptedStream] = []

    def subscribe_to_shard(self, **params: Any) -> dict[str, Any]:
        self.positions.append(params["StartingPosition"])
        answer = self.answers.pop(0)
        if isinstance(answer, ClientError):
            raise answer
        self.streams.append(ScriptedStream(answer))
        return {"EventStream": self.streams[-1]}

    def get_shard_iterator(self, **_: Any) -> dict[str, Any]:
        return {"ShardIterator": "it"}

    def get_records(self, **_: Any) -> dict[str, Any]:
        return {"Records": [], "NextShardIterator": "next"}


def pump(client: ScriptedClient, resubscribe: float = 0.0) -> Pump:
    return Pump(
        client,  # type: ignore[arg-type]
        StreamRef(name="s"),
        lambda: "arn:consumer",
        "s",
        AFTER,
        queue.Queue(),
        resubscribe,
        backoff=Backoff(base=0.0, cap=0.0, rng=random.Random(1)),
    )


def queued(p: Pump) -> list[Any]:
    items = []
    while not p.events.empty():
        items.append(p.events.get_nowait())
    return items


def test_renewals_continue_after_the_last_event_and_the_end_stops_them() -> None:
    client = ScriptedClient(
        [
            [event(["42"], "42"), event(["43"], "43")],  # renewed after the first event
            [event(["44"], "44")],  # Kinesis ended it (the 5 minutes)
            [event(["45"], None, ("c1", "c2"))],
        ]
    )
    p = pump(client)
    p.run()
    assert client.positions == [
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "41"},
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "42"},
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "44"},
    ]
    items = queued(p)
    sequences = [r["SequenceNumber"] for e in items for r in e["Records"]]
    assert sequences == ["42", "44", "45"], "each renewal starts after the last event queued"
    assert shard_end(items[-1]) == End(("c1", "c2"))
    assert all(s.closed for s in client.streams), "every subscription is closed"


def test_in_use_and_limits_back_off_then_subscribe_from_the_same_place() -> None:
    client = ScriptedClient(
        [
            client_error("ResourceInUseException"),
            client_error("LimitExceededException"),
            [event([], None)],
        ]
    )
    p = pump(client, resubscribe=60.0)
    p.run()
    assert len(client.positions) == 3
    assert len({str(position) for position in client.positions}) == 1
    assert [shard_end(e) for e in queued(p)] == [End(())]


def test_other_errors_reach_read_which_starts_over_from_the_continuation() -> None:
    client = ScriptedClient(
        [
            [event(["42"], "42")],
            client_error("ResourceNotFoundException"),
            [event(["43"], None, ("c1",))],
        ]
    )
    forgotten: list[bool] = []
    reader = FanOutShardReader(
        client,  # type: ignore[arg-type]
        StreamRef(name="s"),
        lambda: "arn",
        "s",
        AFTER,
        0.0,
        forget_arn=lambda: forgotten.append(True),
    )
    assert isinstance(reader, SubscribedReader)
    assert [r.sequence_number for r in reader.read().records] == ["42"]
    with pytest.raises(ClientError):
        reader.read()
    last = reader.read()
    assert [r.sequence_number for r in last.records] == ["43"]
    assert (last.shard_end, last.child_shards) == (True, ("c1",))
    assert client.positions[-1] == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "42"}
    assert forgotten == [True], "a consumer not found is looked up again"
    assert reader.read() == ReadResult([], 0, shard_end=True, child_shards=("c1",))
    reader.close()


def test_an_idle_subscription_asks_getrecords_whether_the_shard_ended() -> None:
    """kinesis-local never sends ChildShards: a renewal after no records probes once."""

    class Closed(ScriptedClient):
        def get_records(self, **_: Any) -> dict[str, Any]:
            return {"Records": [], "ChildShards": [{"ShardId": "c1"}]}

    client = Closed([[event([], "41")]])
    p = pump(client)
    p.run()
    items = queued(p)
    assert items[-1] == End(("c1",))


# --- the consumer ---------------------------------------------------------------------------


def test_consumer_names_are_unambiguous_and_valid() -> None:
    assert consumer_name("team-a", "clicks") == "team-a.clicks"
    long = consumer_name("n" * 63, "c" * 253)
    assert len(long) == NAME_LIMIT
    assert long != consumer_name("n" * 63, "c" * 252 + "d"), "the hash keeps them apart"


class Consumers:
    def __init__(self, statuses: list[str], exists: bool) -> None:
        self.statuses = statuses
        self.exists = exists
        self.registered = 0

    def describe_stream_summary(self, **_: Any) -> dict[str, Any]:
        return {"StreamDescriptionSummary": {"StreamARN": "arn:stream"}}

    def register_stream_consumer(self, **_: Any) -> None:
        if self.exists:
            raise client_error("ResourceInUseException", "RegisterStreamConsumer")
        self.registered += 1

    def describe_stream_consumer(self, **_: Any) -> dict[str, Any]:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"ConsumerDescription": {"ConsumerStatus": status, "ConsumerARN": "arn:c"}}

    def deregister_stream_consumer(self, **_: Any) -> None:
        raise client_error("ResourceNotFoundException", "DeregisterStreamConsumer")


def test_registration_waits_for_active_and_finds_an_existing_one() -> None:
    slept: list[float] = []
    fresh = Consumers(["CREATING", "CREATING", "ACTIVE"], exists=False)
    consumers = StreamConsumers(fresh, StreamRef(name="s"), sleep=slept.append)  # type: ignore[arg-type]
    assert consumers.register("n") == "arn:c"
    assert (fresh.registered, len(slept)) == (1, 2)
    existing = Consumers(["ACTIVE"], exists=True)
    assert StreamConsumers(existing, StreamRef(name="s")).register("n") == "arn:c"  # type: ignore[arg-type]
    StreamConsumers(existing, StreamRef(name="s")).deregister("n")  # type: ignore[arg-type]


def test_registration_gives_up_after_its_timeout() -> None:
    now = [0.0]
    stuck = Consumers(["CREATING"], exists=False)
    consumers = StreamConsumers(
        stuck,  # type: ignore[arg-type]
        StreamRef(name="s"),
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        clock=lambda: now[0],
    )
    with pytest.raises(TimeoutError):
        consumers.register("n", timeout=5.0)


# --- the initial-response tolerance -----------------------------------------------------------


def decode(data: bytes) -> list[dict[str, Any]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [m.to_response_dict()["headers"] for m in buffer]


def test_the_encoded_initial_response_is_what_botocore_decodes() -> None:
    assert decode(INITIAL_RESPONSE) == [
        {
            ":message-type": "event",
            ":event-type": "initial-response",
            ":content-type": "application/json",
        }
    ]


class Raw:
    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)
        self.closed = False

    def stream(self, **_: Any) -> Iterator[bytes]:
        while chunk := self.data.read(7):  # messages split across chunks
            yield chunk

    def close(self) -> None:
        self.closed = True


def subscribe_event(sequence: str) -> bytes:
    record = {"Data": "eA==", "PartitionKey": "k", "SequenceNumber": sequence}
    payload = json.dumps(
        {"Records": [record], "ContinuationSequenceNumber": sequence, "MillisBehindLatest": 0}
    )
    return encode_message(
        {":message-type": "event", ":event-type": "SubscribeToShardEvent"}, payload.encode()
    )


def subscribe(body: bytes) -> Any:
    """botocore's own parsing of a SubscribeToShard response with this body."""
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    tolerate_missing_initial_response(client)
    operation = client.meta.service_model.operation_model("SubscribeToShard")
    response = {
        "status_code": 200,
        "headers": {},
        "body": Raw(body),
        "context": {"operation_name": "SubscribeToShard"},
    }
    client.meta.events.emit(
        "before-parse.kinesis.SubscribeToShard",
        operation_model=operation,
        response_dict=response,
        customized_response_dict={},
    )
    shape = operation.output_shape
    assert shape is not None
    return create_parser("json").parse(response, shape), response["body"]


def test_a_stream_starting_with_its_first_event_reads_that_event() -> None:
    parsed, _ = subscribe(subscribe_event("1") + subscribe_event("2"))
    events = [
        e["SubscribeToShardEvent"]["Records"][0]["SequenceNumber"] for e in parsed["EventStream"]
    ]
    assert events == ["1", "2"], "the first event is not lost"


def test_a_stream_with_its_initial_response_passes_byte_for_byte() -> None:
    body = INITIAL_RESPONSE + subscribe_event("1") + subscribe_event("2")
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    tolerate_missing_initial_response(client)
    response: dict[str, Any] = {"status_code": 200, "headers": {}, "body": Raw(body)}
    client.meta.events.emit(
        "before-parse.kinesis.SubscribeToShard",
        response_dict=response,
        customized_response_dict={},
    )
    assert b"".join(response["body"].stream()) == body
    parsed, _ = subscribe(body)
    sequences = [
        e["SubscribeToShardEvent"]["ContinuationSequenceNumber"] for e in parsed["EventStream"]
    ]
    assert sequences == ["1", "2"]


def test_an_exception_first_is_raised_as_kinesis_names_it() -> None:
    refused = encode_message(
        {":message-type": "exception", ":exception-type": "ResourceInUseException"},
        b'{"message":"Another active subscription exists"}',
    )
    parsed, _ = subscribe(refused)
    with pytest.raises(ClientError) as raised:
        list(parsed["EventStream"])
    assert raised.value.response["Error"]["Code"] == "ResourceInUseException"


def test_anything_else_is_refused_as_botocore_refuses_it() -> None:
    other = encode_message({":message-type": "event", ":event-type": "Unknown"}, b"{}")
    with pytest.raises(Exception, match="initial-response"):
        subscribe(other)


def test_workers_look_the_arn_up_once_and_again_after_it_was_not_found() -> None:
    described: list[str] = []

    class Counting(Consumers):
        def describe_stream_consumer(self, **params: Any) -> dict[str, Any]:
            described.append(params["ConsumerName"])
            return super().describe_stream_consumer(**params)

    arn = ConsumerArn(Counting(["ACTIVE"], exists=True), StreamRef(name="s"), "team.clicks")  # type: ignore[arg-type]
    assert (arn(), arn()) == ("arn:c", "arn:c")
    arn.forget()
    assert arn() == "arn:c"
    assert described == ["team.clicks", "team.clicks"]
    with pytest.raises(RuntimeError, match="CREATING"):
        ConsumerArn(Consumers(["CREATING"], exists=True), StreamRef(name="s"), "n")()  # type: ignore[arg-type]
