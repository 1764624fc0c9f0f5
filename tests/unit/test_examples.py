"""The example processor and producer do what their docstrings say."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from clickstream.processor import PageViewsPerMinute
from clickstream.produce import ensure_stream, records

from streamconsumer.loading import load_processor
from streamconsumer.processor import Record
from streamconsumer.testing import ProcessorHarness


def click(sequence: int, page: str, ts: str) -> Record:
    body = json.dumps({"page": page, "user": "u", "ts": ts}).encode()
    return Record(body, "u", str(sequence), checkpoint_sequence=str(sequence))


def test_page_views_per_minute(caplog: pytest.LogCaptureFixture) -> None:
    factory = load_processor("clickstream.processor:PageViewsPerMinute")
    processor = factory()
    assert isinstance(processor, PageViewsPerMinute)
    harness = ProcessorHarness(processor, "s")
    harness.initialize()
    batch = [
        click(1, "/pricing", "2026-11-22T14:05:09Z"),
        click(2, "/pricing", "2026-11-22T14:05:40Z"),
        click(3, "/", "2026-11-22T14:06:01Z"),
        Record(b"not json", "u", "4", checkpoint_sequence="4"),
    ]
    with caplog.at_level(logging.INFO, logger="clickstream"):
        harness.process(batch)
    lines = [json.loads(r.message) for r in caplog.records]
    assert lines == [
        {"minute": "2026-11-22T14:05", "page": "/pricing", "views": 2},
        {"minute": "2026-11-22T14:06", "page": "/", "views": 1},
    ]
    assert processor.malformed == 1
    assert harness.checkpoints == ["4"], "checkpointed after the flush, malformed included"


def _summary(status: str) -> dict[str, Any]:
    return {
        "StreamDescriptionSummary": {
            "StreamName": "clicks",
            "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/clicks",
            "StreamStatus": status,
            "RetentionPeriodHours": 24,
            "StreamCreationTimestamp": datetime(2026, 11, 26, tzinfo=UTC),
            "EnhancedMonitoring": [],
            "OpenShardCount": 2,
        }
    }


def test_the_producer_creates_a_missing_stream_and_returns_once_it_is_active() -> None:
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    named = {"StreamName": "clicks"}
    with Stubber(client) as stub:
        stub.add_response("create_stream", {}, {**named, "ShardCount": 2})
        stub.add_response("describe_stream_summary", _summary("CREATING"), named)
        stub.add_client_error("create_stream", "ResourceInUseException")  # it exists now
        stub.add_response("describe_stream_summary", _summary("ACTIVE"), named)
        ensure_stream(client, "clicks", 2, wait=0)
        stub.assert_no_pending_responses()


def test_the_producer_keys_each_event_by_its_user() -> None:
    put = records(50, seed=7)
    data = [entry["Data"] for entry in put]
    assert all(isinstance(each, bytes) for each in data)
    events = [json.loads(each) for each in data if isinstance(each, bytes)]
    assert len(put) == 50
    assert [entry["PartitionKey"] for entry in put] == [event["user"] for event in events]
    assert len({entry["PartitionKey"] for entry in put}) > 1, "one key would fill one shard"
    now = datetime.now(UTC)
    for event in events:
        ts = datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert now - timedelta(minutes=6) < ts <= now, event
