"""The operator's side of enhanced fan-out: which spec changes register or deregister
the stream consumer (the Kinesis calls themselves: tests/integration/test_kinesis_fanout.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streamconsumer.controller import fanout
from streamconsumer.models.resource import KinesisSource, Source

POLLING = {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}}
FAN_OUT = {"kinesis": {"streamName": "clicks", "region": "eu-west-1", "consumer": "fanOut"}}
TABLE = {"dynamodbStreams": {"tableName": "orders", "region": "eu-west-1"}}


class Calls:
    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []

    def __call__(self, kinesis: KinesisSource) -> Calls:
        return self

    def register(self, name: str) -> str:
        self.made.append(("register", name))
        return "arn:c"

    def deregister(self, name: str) -> None:
        self.made.append(("deregister", name))


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
    asyncio.run(fanout.consumer_changed("team", "clicks", old, new))
    assert calls.made == expected


def test_only_fan_out_registers_and_deregisters(calls: Calls) -> None:
    for source in (POLLING, TABLE):
        spec = Source.model_validate(source)
        assert asyncio.run(fanout.register("team", "clicks", spec)) is None
        asyncio.run(fanout.deregister("team", "clicks", spec))
    assert calls.made == []
    spec = Source.model_validate(FAN_OUT)
    assert asyncio.run(fanout.register("team", "clicks", spec)) == "arn:c"
    asyncio.run(fanout.deregister("team", "clicks", spec))
    assert calls.made == [("register", "team.clicks"), ("deregister", "team.clicks")]
