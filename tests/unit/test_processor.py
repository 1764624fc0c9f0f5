"""The processor API: forward-only checkpoints that never pass a delivered record,
SHARD_END only at shard end, and entrypoint loading with clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from streamconsumer.processor import (
    SHARD_END,
    BaseRecordProcessor,
    Checkpointer,
    CheckpointError,
    FunctionProcessor,
    Record,
    load_processor,
    warm_up,
)
from streamconsumer.worker.config import WorkerConfig


def rec(sequence: int, sub: int | None = None, safe: int | None = None) -> Record:
    checkpoint = str(safe if safe is not None else sequence)
    return Record(b"d", "k", str(sequence), sub_sequence_number=sub, checkpoint_sequence=checkpoint)


def test_checkpoint_stores_the_last_delivered_record() -> None:
    stored: list[str] = []
    checkpointer = Checkpointer("s", stored.append)
    checkpointer.checkpoint()
    assert stored == [], "nothing delivered, nothing to store"
    checkpointer._delivering([rec(5), rec(7)])
    checkpointer.checkpoint()
    checkpointer.checkpoint()
    assert stored == ["7"], "a repeated checkpoint is a no-op"


def test_checkpoint_refuses_undelivered_and_backwards() -> None:
    stored: list[str] = []
    checkpointer = Checkpointer("s", stored.append, start_sequence="3")
    checkpointer._delivering([rec(5), rec(7)])
    with pytest.raises(CheckpointError, match="not delivered"):
        checkpointer.checkpoint(rec(8))
    with pytest.raises(CheckpointError, match="not delivered"):
        checkpointer.checkpoint("8")
    with pytest.raises(CheckpointError, match="not a sequence"):
        checkpointer.checkpoint("abc")
    checkpointer.checkpoint(rec(7))
    with pytest.raises(CheckpointError, match="behind"):
        checkpointer.checkpoint("5")
    assert stored == ["7"]


def test_checkpoint_inside_an_aggregate_stays_before_it() -> None:
    stored: list[str] = []
    checkpointer = Checkpointer("s", stored.append)
    parts = [rec(20, sub, safe=(20 if sub == 2 else 10)) for sub in range(3)]
    checkpointer._delivering([rec(10), *parts])
    checkpointer.checkpoint(parts[1])
    assert stored == ["10"]
    checkpointer.checkpoint(parts[2])
    assert stored == ["10", "20"]


def test_shard_end_only_through_shard_ended() -> None:
    stored: list[str] = []
    checkpointer = Checkpointer("s", stored.append)
    checkpointer._delivering([rec(1)])
    checkpointer.checkpoint()
    checkpointer._shard_ended()
    BaseRecordProcessor().shard_ended(checkpointer)
    assert stored == ["1", SHARD_END]


def test_function_form_checkpoints_after_the_batch_returns() -> None:
    stored: list[str] = []
    seen: list[list[bytes]] = []
    processor = FunctionProcessor(lambda records: seen.append([r.data for r in records]))
    checkpointer = Checkpointer("s", stored.append)
    batch = [rec(1), rec(2)]
    checkpointer._delivering(batch)
    processor.process_records(batch, checkpointer)
    assert seen == [[b"d", b"d"]]
    assert stored == ["2"]

    def failing(records: list[Record]) -> None:
        raise RuntimeError("sink down")

    with pytest.raises(RuntimeError):
        FunctionProcessor(failing).process_records(batch, checkpointer)
    assert stored == ["2"], "no checkpoint when the function raises"


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
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(tmp_path),
        **WorkerConfig(
            operator_url="http://127.0.0.1:9",
            namespace="n",
            consumer="c",
            worker_name="w",
            token_path=str(tmp_path / "token"),
            entrypoint="broken:NeedsJava",
        ).to_env(),
    }
    worker = subprocess.run(
        [sys.executable, "-m", "streamconsumer.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 1
    assert "processor warm-up failed: java: command not found" in worker.stderr
    assert "Traceback" not in worker.stderr
