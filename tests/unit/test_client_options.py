"""Every AWS client the worker and the operator make ends its calls in seconds, not
botocore's default minute (a stalled call must not hold a shard past its lease), and
goes where its spec says: the source clients and every dead-letter target's."""

from __future__ import annotations

import copy
from typing import Any

import boto3
import pytest

from streamconsumer.deadletter import writer_for
from streamconsumer.models.failure import (
    DeadLetterTarget,
    KinesisDeadLetters,
    S3DeadLetters,
    SqsDeadLetters,
)
from streamconsumer.sources.dynamodb_streams import streams_client
from streamconsumer.sources.kinesis import kinesis_client

ENDPOINT = "http://127.0.0.1:9"  # never called
REGION = "eu-west-1"


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """boto3.client's calls: (service, keywords). The clients are real (they call out
    only when asked to): the source clients' factories set them up further."""
    calls: list[tuple[str, dict[str, Any]]] = []
    real = boto3.client

    def client(service: str, **options: Any) -> object:
        calls.append((service, options))
        # A copy: botocore rewrites the retries of the Config it is given.
        return real(service, **copy.deepcopy(options))  # type: ignore[call-overload]

    monkeypatch.setattr(boto3, "client", client)
    return calls


def assert_bounded(options: dict[str, Any], max_attempts: int = 5) -> None:
    config = options["config"]
    assert config.retries == {"mode": "standard", "max_attempts": max_attempts}
    assert (config.connect_timeout, config.read_timeout) == (5, 10)
    assert config.tcp_keepalive is True


def test_source_clients(made: list[tuple[str, dict[str, Any]]]) -> None:
    kinesis_client(REGION, ENDPOINT)
    streams_client(REGION, ENDPOINT, max_attempts=2)
    assert [service for service, _ in made] == ["kinesis", "dynamodbstreams"]
    (_, kinesis), (_, streams) = made
    assert_bounded(kinesis)
    assert_bounded(streams, max_attempts=2)
    for options in (kinesis, streams):
        assert (options["region_name"], options["endpoint_url"]) == (REGION, ENDPOINT)


@pytest.mark.parametrize(
    ("target", "service"),
    [
        (
            DeadLetterTarget(
                kinesis=KinesisDeadLetters(stream_name="d", region=REGION, endpoint_url=ENDPOINT)
            ),
            "kinesis",
        ),
        (
            DeadLetterTarget(
                sqs=SqsDeadLetters(queue_url=f"{ENDPOINT}/q", region=REGION, endpoint_url=ENDPOINT)
            ),
            "sqs",
        ),
        (
            DeadLetterTarget(
                s3=S3DeadLetters(bucket="dead-letters", region=REGION, endpoint_url=ENDPOINT)
            ),
            "s3",
        ),
    ],
)
def test_dead_letter_clients(
    made: list[tuple[str, dict[str, Any]]], target: DeadLetterTarget, service: str
) -> None:
    writer_for(target)
    [(made_for, options)] = made
    assert made_for == service
    assert_bounded(options)
    assert (options["region_name"], options["endpoint_url"]) == (REGION, ENDPOINT)
