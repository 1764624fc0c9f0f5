"""A source spec travels to the worker as settings (WorkerConfig fields) and comes back
the same: each kind's own fields, and for every AWS kind the same region and endpoint."""

from __future__ import annotations

from typing import Any

import pytest

from streamconsumer.models.resource import Source
from streamconsumer.sources.factory import source_settings, spec_from_settings
from streamconsumer.sources.registry import selected
from streamconsumer.worker.config import WorkerConfig
from testbed.specs import worker_config

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


# The source variables of a 0.1 operator's pod template, as it wrote them: before
# STREAMCONSUMER_SOURCE existed (docs/upgrades.md#operator-and-workers-of-different-versions).
OLDER = {
    "STREAMCONSUMER_STREAM_NAME": "clicks",
    "STREAMCONSUMER_KINESIS_CONSUMER": "fanOut",
    "STREAMCONSUMER_REGION": "eu-west-1",
}


def test_a_worker_reads_the_source_an_older_operator_wrote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {**worker_config().to_env(), **OLDER}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("STREAMCONSUMER_SOURCE", raising=False)
    config = WorkerConfig.from_env()
    assert spec_from_settings(config.source, config.source_settings) == selected(
        Source.model_validate(
            {"kinesis": {"streamName": "clicks", "consumer": "fanOut", "region": "eu-west-1"}}
        )
    )


def test_an_older_worker_finds_its_variables_in_a_newer_pod_template() -> None:
    spec = Source.model_validate(
        {"kinesis": {"streamName": "clicks", "consumer": "fanOut", "region": "eu-west-1"}}
    )
    env = worker_config(**source_settings(spec)).to_env()
    assert OLDER.items() <= env.items()
    assert not any(name.startswith("STREAMCONSUMER_SOURCE_") for name in env)


def test_the_pod_template_keeps_the_previous_releases_order_of_variables() -> None:
    """Another order is another pod template: the Deployment would roll every worker on
    an operator upgrade (tests/e2e/test_upgrade.py caught it)."""
    source = Source.model_validate(
        {"kinesis": {"streamName": "s", "region": "eu-west-1", "endpointURL": "http://e:1"}}
    )
    env = list(worker_config(**source_settings(source)).to_env())
    ours = [
        name
        for name in env
        if name.removeprefix("STREAMCONSUMER_").lower()
        in ("source", "stream_name", "region", "kinesis_consumer", "endpoint_url", "max_records")
    ]
    assert ours == [
        "STREAMCONSUMER_SOURCE",
        "STREAMCONSUMER_STREAM_NAME",
        "STREAMCONSUMER_REGION",
        "STREAMCONSUMER_KINESIS_CONSUMER",
        "STREAMCONSUMER_ENDPOINT_URL",
        "STREAMCONSUMER_MAX_RECORDS",
    ]
