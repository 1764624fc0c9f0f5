"""The processor API: forward-only checkpoints that never pass a delivered record,
SHARD_END only at shard end, and entrypoint loading with clear errors."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from streamconsumer.loading import load_processor
from streamconsumer.processor import (
    SHARD_END,
    BaseRecordProcessor,
    Checkpointer,
    CheckpointError,
    FunctionProcessor,
    Progress,
    Record,
    warm_up,
)
from streamconsumer.testing import ProcessorHarness, make_records
from testbed.specs import worker_config
from testbed.worker_run import run_worker


def rec(sequence: int, sub: int | None = None, safe: int | None = None) -> Record:
    checkpoint = str(safe if safe is not None else sequence)
    return Record(b"d", "k", str(sequence), sub_sequence_number=sub, checkpoint_sequence=checkpoint)


class Checkpointing(BaseRecordProcessor):
    """Checkpoints whatever `at` says after each batch (None: everything delivered)."""

    def __init__(self) -> None:
        self.at: Record | str | None = None

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint(self.at)


def test_checkpoint_stores_the_last_delivered_record() -> None:
    harness = ProcessorHarness(Checkpointing(), "s")
    harness.process([])
    assert harness.checkpoints == [], "nothing delivered, nothing to store"
    harness.process([rec(5), rec(7)])
    harness.process([])
    assert harness.checkpoints == ["7"], "a repeated checkpoint is a no-op"


def test_checkpoint_refuses_undelivered_and_backwards() -> None:
    progress = Progress("s", start_sequence="3")
    checkpointer = Checkpointer(progress)
    progress.begin([rec(5), rec(7)])
    with pytest.raises(CheckpointError, match="not delivered"):
        checkpointer.checkpoint(rec(8))
    with pytest.raises(CheckpointError, match="not delivered"):
        checkpointer.checkpoint("8")
    with pytest.raises(CheckpointError, match="not a sequence"):
        checkpointer.checkpoint("abc")
    checkpointer.checkpoint(rec(7))
    with pytest.raises(CheckpointError, match="behind"):
        checkpointer.checkpoint("5")
    progress.returned()
    assert progress.pending() == "7"


def test_checkpoint_inside_an_aggregate_stays_before_it() -> None:
    progress = Progress("s")
    checkpointer = Checkpointer(progress)
    parts = [rec(20, sub, safe=(20 if sub == 2 else 10)) for sub in range(3)]
    progress.begin([rec(10), *parts])
    checkpointer.checkpoint(parts[1])
    assert progress.requested == "10"
    checkpointer.checkpoint(parts[2])
    assert progress.requested == "20"


def test_a_sequence_number_inside_an_aggregate_delivered_in_part_stays_before_it() -> None:
    """A bisected batch (or any batch) may end inside a KPL aggregate: checkpoint(seq) with
    the aggregate's sequence number must not store it (resuming after it would skip the
    sub-records not yet delivered), but the last complete position, as checkpoint(record)."""
    progress = Progress("s")
    checkpointer = Checkpointer(progress)
    parts = [rec(20, sub, safe=(20 if sub == 3 else 10)) for sub in range(4)]
    progress.begin([rec(10), *parts[:2]])  # the aggregate's first half only
    checkpointer.checkpoint(parts[1].sequence_number)
    assert progress.requested == "10"
    progress.returned()
    progress.begin(parts[2:])
    checkpointer.checkpoint("20")
    assert progress.requested == "20", "its last sub-record delivered: the whole aggregate"


def test_shard_end_only_after_every_batch_returned() -> None:
    harness = ProcessorHarness(FunctionProcessor(lambda records: None), "s")
    harness.process([rec(1)])
    assert harness.checkpoints == ["1"]
    harness.end_shard()
    assert harness.checkpoints == ["1", SHARD_END]
    progress = Progress("s")
    Checkpointer(progress).checkpoint()
    assert progress.requested is None, "a bare checkpoint is SHARD_END only at shard end"


def test_a_call_that_raises_stores_nothing_it_asked_for() -> None:
    class CheckpointsThenRaises(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            checkpointer.checkpoint()
            raise RuntimeError("the sink failed after the checkpoint call")

    harness = ProcessorHarness(CheckpointsThenRaises(), "s")
    with pytest.raises(RuntimeError, match="sink failed"):
        harness.process([rec(1), rec(2)])
    assert harness.checkpoints == []
    harness.shutdown()  # the default shutdown checkpoints what is done: nothing
    assert harness.checkpoints == []


def test_function_form_checkpoints_after_the_batch_returns() -> None:
    seen: list[list[bytes]] = []
    harness = ProcessorHarness(
        FunctionProcessor(lambda records: seen.append([r.data for r in records])), "s"
    )
    harness.process([rec(1), rec(2)])
    assert seen == [[b"d", b"d"]]
    assert harness.checkpoints == ["2"]

    def failing(records: list[Record]) -> None:
        raise RuntimeError("sink down")

    failing_harness = ProcessorHarness(FunctionProcessor(failing), "s")
    with pytest.raises(RuntimeError, match="sink down"):
        failing_harness.process([rec(3)])
    assert failing_harness.checkpoints == [], "no checkpoint when the function raises"


def test_load_processor_resolves_classes_and_functions() -> None:
    module = types.ModuleType("user_processors")

    class Good(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            pass

    class Partial:
        def process_records(self) -> None:
            pass

    module.Good = Good  # type: ignore[attr-defined]
    module.Partial = Partial  # type: ignore[attr-defined]
    module.handle = lambda records: None  # type: ignore[attr-defined]
    module.constant = 3  # type: ignore[attr-defined]
    sys.modules["user_processors"] = module
    try:
        factory = load_processor("user_processors:Good")
        assert isinstance(factory(), Good)
        assert factory() is not factory(), "one instance per shard"
        assert isinstance(load_processor("user_processors:handle")(), FunctionProcessor)
        for entrypoint, message in [
            ("user_processors", "must look like"),
            ("no_such_module_xyz:Name", "cannot import"),
            ("user_processors:Missing", "has no Missing"),
            ("user_processors:Partial", "lacks initialize"),
            ("user_processors:constant", "neither"),
        ]:
            with pytest.raises(ValueError, match=message):
                load_processor(entrypoint)
    finally:
        del sys.modules["user_processors"]


def test_warm_up_runs_once_on_a_fresh_instance() -> None:
    warmed: list[object] = []

    class Slow(BaseRecordProcessor):
        def warm_up(self) -> None:
            warmed.append(self)

    warm_up(Slow)
    warm_up(lambda: FunctionProcessor(print))  # no hook: nothing to do
    assert len(warmed) == 1


def test_worker_says_why_when_warm_up_fails(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(
        "from streamconsumer.processor import BaseRecordProcessor\n"
        "class NeedsJava(BaseRecordProcessor):\n"
        "    def warm_up(self):\n"
        "        raise FileNotFoundError('java: command not found')\n"
    )
    config = worker_config(
        operator_url="http://127.0.0.1:9",
        token_path=str(tmp_path / "token"),
        entrypoint="broken:NeedsJava",
    )
    worker = run_worker(config, pythonpath=tmp_path)
    assert worker.returncode == 1
    assert "processor warm-up failed: java: command not found" in worker.stderr
    assert "Traceback" not in worker.stderr


def test_the_harness_makes_records_a_checkpoint_can_name_and_runs_functions_and_lease_loss() -> (
    None
):
    """Issue 27: `Record(data, key, seq)` left checkpoint_sequence None, so checkpoint()
    stored nothing and the README's harness example failed as written."""
    records = make_records(b"a", "b", first_sequence=41)
    assert [(r.data, r.sequence_number) for r in records] == [(b"a", "41"), (b"b", "42")]
    seen: list[bytes] = []
    harness = ProcessorHarness(lambda batch: seen.extend(r.data for r in batch))
    harness.initialize()
    harness.process(records)
    assert seen == [b"a", b"b"]
    assert harness.checkpoints == ["42"]

    class Losing(BaseRecordProcessor):
        lost = False

        def lease_lost(self) -> None:
            self.lost = True

    losing = Losing()
    ProcessorHarness(losing).lose_lease()
    assert losing.lost
