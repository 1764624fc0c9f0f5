"""The operator's side of enhanced fan-out: which spec changes register or deregister
the stream consumer (the Kinesis calls themselves: tests/integration/test_kinesis_fanout.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streamconsumer.controller.aws import fanout
from streamconsumer.controller.aws.access import AccessPolicy, AccessRefused
from streamconsumer.models.resource import Source
from streamconsumer.sources.base import Identity
from streamconsumer.sources.kinds.kinesis import KinesisSpec
from streamconsumer.sources.registry import selected
from testbed.specs import TEST_BED_ACCESS as ACCESS

POLLING = {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}}
FAN_OUT = {"kinesis": {"streamName": "clicks", "region": "eu-west-1", "consumer": "fanOut"}}
OTHER_STREAM = {"kinesis": {**FAN_OUT["kinesis"], "streamName": "views"}}
TABLE = {"dynamodbStreams": {"tableName": "orders", "region": "eu-west-1"}}
ALL_NAMESPACES = AccessPolicy(allow_all_namespaces=True)  # any stream over AWS's endpoints


class Calls:
    """Registrations made, per stream; every stream answers for itself."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []
        self.registered: dict[str, str] = {}  # stream -> its consumer's ARN

    def __call__(self, source: Source, identity: Identity) -> StreamCalls:
        _, spec = selected(source)
        assert isinstance(spec, KinesisSpec), "only Kinesis fans out"
        return StreamCalls(self, spec.stream_name or spec.stream_arn or "")


class StreamCalls:
    def __init__(self, calls: Calls, stream: str) -> None:
        self.calls, self.stream = calls, stream

    def register(self, name: str) -> str:
        self.calls.made.append(("register", name))
        arn = self.calls.registered.setdefault(self.stream, f"arn:{self.stream}/{name}")
        return arn

    def consumer_arn(self, name: str) -> str | None:
        return self.calls.registered.get(self.stream)

    def deregister(self, name: str) -> None:
        self.calls.made.append(("deregister", name))
        self.calls.registered.pop(self.stream, None)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    made = Calls()
    monkeypatch.setattr(fanout, "stream_consumers", made)
    return made


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (POLLING, FAN_OUT, [("register", "team.clicks")]),
        (FAN_OUT, POLLING, [("deregister", "team.clicks")]),
        (FAN_OUT, FAN_OUT, [("register", "team.clicks")]),  # idempotent: a new endpoint
        (POLLING, POLLING, []),
        (TABLE, TABLE, []),
    ],
)
def test_source_changes(
    calls: Calls, old: dict[str, Any], new: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    asyncio.run(fanout.consumer_changed(ACCESS, "team", "clicks", old, new))
    assert calls.made == expected


def test_only_fan_out_registers_and_deregisters(calls: Calls) -> None:
    for source in (POLLING, TABLE):
        spec = Source.model_validate(source)
        assert asyncio.run(fanout.register(ACCESS, "team", "clicks", spec)) is None
        asyncio.run(fanout.deregister(ACCESS, "team", "clicks", spec))
    assert calls.made == []
    spec = Source.model_validate(FAN_OUT)
    assert asyncio.run(fanout.register(ACCESS, "team", "clicks", spec)) == "arn:clicks/team.clicks"
    asyncio.run(fanout.deregister(ACCESS, "team", "clicks", spec))
    assert calls.made == [("register", "team.clicks"), ("deregister", "team.clicks")]


def test_fan_out_moving_to_another_stream_deregisters_from_the_old_one(calls: Calls) -> None:
    """fanOut on stream A, then on stream B: registered on B, and A's consumer is gone
    (it would count against A's limit of 20 consumers, and bill, forever)."""
    asyncio.run(fanout.register(ACCESS, "team", "clicks", Source.model_validate(FAN_OUT)))
    arn = asyncio.run(fanout.consumer_changed(ACCESS, "team", "clicks", FAN_OUT, OTHER_STREAM))
    assert arn == "arn:views/team.clicks"
    assert calls.registered == {"views": "arn:views/team.clicks"}
    assert calls.made[1:] == [("register", "team.clicks"), ("deregister", "team.clicks")]


def test_the_same_stream_under_another_spelling_keeps_its_consumer(calls: Calls) -> None:
    """A new endpoint URL (or region spelling) may name the very stream it named before:
    the consumer just registered is the old one, and stays."""
    moved = {"kinesis": {**FAN_OUT["kinesis"], "endpointURL": "https://kinesis.example"}}
    asyncio.run(fanout.register(ACCESS, "team", "clicks", Source.model_validate(FAN_OUT)))
    asyncio.run(fanout.consumer_changed(ACCESS, "team", "clicks", FAN_OUT, moved))
    assert calls.registered == {"clicks": "arn:clicks/team.clicks"}
    assert ("deregister", "team.clicks") not in calls.made


def test_moving_to_an_endpoint_the_policy_refuses_deregisters_first(calls: Calls) -> None:
    """Found by review: the refused register raised, and the consumer registered on the
    old endpoint stayed (billed, one of the stream's 20 slots) after the resource went."""
    moved = {"kinesis": {**FAN_OUT["kinesis"], "endpointURL": "https://internal.corp"}}
    with pytest.raises(AccessRefused):
        asyncio.run(fanout.consumer_changed(ALL_NAMESPACES, "team", "clicks", FAN_OUT, moved))
    assert calls.made == [("deregister", "team.clicks")]


def test_with_nothing_configured_no_stream_consumer_is_registered(calls: Calls) -> None:
    """Issue 40: the chart's defaults let any namespace take a fan-out slot of any stream
    the operator's identity could reach."""
    nothing, fan_out = AccessPolicy(), Source.model_validate(FAN_OUT)
    with pytest.raises(AccessRefused, match="no AWS access is configured for namespace team"):
        asyncio.run(fanout.register(nothing, "team", "clicks", fan_out))
    asyncio.run(fanout.consumer_changed(nothing, "team", "clicks", FAN_OUT, POLLING))
    asyncio.run(fanout.deregister(nothing, "team", "clicks", fan_out))
    assert calls.made == []
