"""A processor written for kclpy's v3 interface runs on the worker as it stands (issue 43):
the entrypoint loader recognizes it, and the worker's own shard driver (through
ProcessorHarness) delivers kclpy's messages, built by kclpy's decoder, with KCL's
checkpointer semantics. kclpy's Python package is the real one, from PyPI."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from streamconsumer import kclpy
from streamconsumer.loading import load_processor
from streamconsumer.processor import Record
from streamconsumer.testing import ProcessorHarness, make_records
from testbed.kclpy import kclpy_path

SHARD = "shardId-000000000007"


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(kclpy_path()))
    from testbed.kclpy_app import KclApp

    KclApp.seen, KclApp.plan, KclApp.errors = [], [], []
    yield KclApp
    sys.modules.pop("testbed.kclpy_app", None)


def harness(start: str | None = None) -> ProcessorHarness:
    return ProcessorHarness(load_processor("testbed.kclpy_app:KclApp")(), SHARD, start)


def aggregate(sequence: str, parts: int) -> list[Record]:
    """The user records of one KPL aggregate, as the worker de-aggregates them."""
    return [
        Record(b"part-%d" % i, f"key-{i}", sequence, None, i, checkpoint_sequence=None)
        for i in range(parts)
    ]


def test_the_loader_runs_a_kclpy_class_through_the_adapter(app: Any) -> None:
    assert kclpy.is_kclpy_processor(app)
    assert isinstance(load_processor("testbed.kclpy_app:KclApp")(), kclpy.KclpyProcessor)
    assert not kclpy.is_kclpy_processor(kclpy.KclpyProcessor)


def test_kcl_messages_and_a_checkpoint_of_all_delivered(app: Any) -> None:
    running = harness(start="4")
    delivery = running.deliver(make_records("a", "b", first_sequence=5))
    assert delivery.checkpoints == ["6"], "checkpoint(): all delivered so far"
    assert app.seen[0] == ("initialize", (SHARD, "4"))
    assert app.seen[1] == ("process_records", [("5", 0, "key", b"a"), ("6", 0, "key", b"b")])


def test_a_checkpoint_at_a_sequence_number_stores_that_record(app: Any) -> None:
    app.plan = [("6", None)]
    delivery = harness().deliver(make_records("a", "b", "c", first_sequence=5))
    assert delivery.checkpoints[0] == "6"


def test_a_checkpoint_kcl_would_refuse_raises_kcls_checkpoint_error(app: Any) -> None:
    app.plan = [("99", None), "skip"]
    harness().deliver(make_records("a", first_sequence=5))
    assert app.errors == ["IllegalArgumentException"], "past what was delivered"


def test_a_checkpoint_inside_an_aggregate_never_passes_its_rest(app: Any) -> None:
    """KCL's (sequence, sub-sequence) inside a KPL aggregate: the aggregate's parts after
    it are not done, so nothing may be stored that resumes after the aggregate."""
    app.plan = [("9", 1)]
    running = harness(start="8")
    delivery = running.deliver(aggregate("9", 3))
    assert "9" not in delivery.checkpoints
    assert [r[1] for r in app.seen[1][1]] == [0, 1, 2], "sub-sequence numbers as KCL's"


def test_shard_end_stores_shard_end_when_the_processor_checkpoints(app: Any) -> None:
    running = harness()
    running.deliver(make_records("a", first_sequence=5))
    running.end_shard()
    assert running.checkpoints[-1] == "SHARD_END"
    assert ("shard_ended", None) in app.seen


def test_lease_lost_and_shutdown_requested_reach_the_processor(app: Any) -> None:
    running = harness()
    running.deliver(make_records("a", first_sequence=5))
    running.shutdown()
    running.lose_lease()
    assert [call for call, _ in app.seen[-2:]] == ["shutdown_requested", "lease_lost"]
