"""A source spec travels to the worker as settings (WorkerConfig fields) and comes back
the same: each kind's own fields, and for every AWS kind the same region and endpoint."""

from __future__ import annotations

from typing import Any

import pytest

from streamconsumer.models.resource import Source
from streamconsumer.sources.factory import source_settings, spec_from_settings
from streamconsumer.sources.registry import selected

LOCATED = {"region": "eu-west-1", "endpointURL": "http://127.0.0.1:1"}


@pytest.mark.parametrize(
    ("source", "settings"),
    [
        (
            {"kinesis": {"streamName": "clicks", "consumer": "fanOut", **LOCATED}},
            {
                "source": "kinesis",
                "stream_name": "clicks",
                "stream_arn": None,
                "kinesis_consumer": "fanOut",
                "region": "eu-west-1",
                "endpoint_url": "http://127.0.0.1:1",
            },
        ),
        (
            {"kinesis": {"streamARN": "arn:aws:kinesis:eu-west-1:123456789012:stream/c"}},
            {
                "source": "kinesis",
                "stream_name": None,
                "stream_arn": "arn:aws:kinesis:eu-west-1:123456789012:stream/c",
                "kinesis_consumer": "polling",
                "region": None,
                "endpoint_url": None,
            },
        ),
        (
            {"dynamodbStreams": {"tableName": "orders", **LOCATED}},
            {
                "source": "dynamodbStreams",
                "table_name": "orders",
                "stream_arn": None,
                "region": "eu-west-1",
                "endpoint_url": "http://127.0.0.1:1",
            },
        ),
    ],
)
def test_a_source_spec_travels_as_settings_and_back(
    source: dict[str, Any], settings: dict[str, str | None]
) -> None:
    spec = Source.model_validate(source)
    assert source_settings(spec) == settings
    assert spec_from_settings(settings["source"] or "", settings) == selected(spec), "the same"
