"""The example processor does what its docstring says."""

from __future__ import annotations

import json
import logging

import pytest
from clickstream.processor import PageViewsPerMinute

from streamconsumer.processor import Record, load_processor
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
