"""A thread-free host of the worker's driver (`worker/driver.py`) for one ShardMachine in
unit tests: processor calls run inline, checkpoints are answered by a function, time is
a number that only moves forward."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from streamconsumer.core.backoff import Backoff
from streamconsumer.deadletter import DeadLetterWriter, FailedBatch
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    StartPosition,
    StartPositionType,
)
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.batching import BatchingWindow
from streamconsumer.worker.calls import Fanout, in_turn
from streamconsumer.worker.driver import Effects, ShardDriver
from streamconsumer.worker.shard import Answer, Call, DeadLetter, ShardMachine, Skip


def batch(*sequences: int, end: bool = False) -> ReadResult:
    records = [Record(b"d", "k", str(s), checkpoint_sequence=str(s)) for s in sequences]
    return ReadResult(records, millis_behind_latest=0, shard_end=end)


class Drive(Effects):
    """Runs one ShardMachine to quiescence on a fake clock through the worker's driver:
    processor calls on `processor`, checkpoints answered by `answer` (default: saved);
    each step moves the clock on by 10 ms."""

    def __init__(
        self,
        processor: BaseRecordProcessor,
        fence: float = 1e9,
        answer: Callable[[CheckpointRequest], Answer] = lambda _: Answer.SAVED,
        wants_empty_batches: bool = False,
        policy: FailurePolicy | None = None,
        dead_letter_failures: int = 0,
        dead_letter_writer: DeadLetterWriter | None = None,
        parallelism: int = 1,
        batch_size: int | None = None,
        fanout: Fanout = in_turn,
        keep: Callable[[Record], bool] | None = None,
        window: BatchingWindow | None = None,
        end: datetime | None = None,
    ) -> None:
        self.clock = 0.0
        self.epoch: float | None = None  # the wall clock at time 0 (records' ages)
        self.processor = processor
        self.answer = answer
        self.sent: list[CheckpointRequest] = []
        self.skipped: list[Skip] = []
        self.dead_letters: list[DeadLetter] = []
        self.dead_letter_failures = dead_letter_failures  # writes that fail first
        self.writer = dead_letter_writer  # writes each letter, as worker/runtime.py does
        self.machine = ShardMachine(
            "w",
            Assignment(
                shard_id="s",
                epoch=1,
                start=StartPosition(type=StartPositionType.TRIM_HORIZON),
                end=end,
            ),
            fence_deadline=fence,
            prefetch=10,
            retry=Backoff(base=0.1, cap=30.0, rng=random.Random(0)),
            wants_empty_batches=wants_empty_batches,
            policy=policy,
            parallelism=parallelism,
            batch_size=batch_size,
            keep=keep,
            window=window,
        )
        self.driver = ShardDriver(self.machine, self, lambda: self.processor, "ns/c", fanout)
        self._until = 0.0
        self._first = True

    def run(self, until: float) -> None:
        self._until, self._first = until, True
        self.driver.drive()

    # --- the driver's effects -------------------------------------------------------------

    def now(self) -> float:
        return self.clock  # (a processor may move it on)

    def proceed(self) -> bool:
        if not self._first:
            self.clock += 0.01
        self._first = False
        return self.clock <= self._until

    def wait(self, until: float | None) -> bool:
        if until is None or until > self._until:
            self.clock = max(self.clock, self._until)  # nothing happens before `until`
            return False
        self.clock = until
        return True

    def wall(self) -> float | None:
        """The wall clock for records' ages: `epoch` seconds at time 0 (None: unknown)."""
        return None if self.epoch is None else self.epoch + self.clock

    def checkpoint(self, request: CheckpointRequest) -> Answer:
        self.sent.append(request)
        return self.answer(request)

    def write(self, batch: FailedBatch) -> None:
        if self.writer is not None:
            self.writer.write(batch)
        elif self.dead_letter_failures:
            self.dead_letter_failures -= 1
            raise RuntimeError("target down")

    def settled(self, step: Call, error: Exception | None) -> None:
        if isinstance(step, Skip):
            self.skipped.append(step)
        elif isinstance(step, DeadLetter) and error is None:
            self.dead_letters.append(step)

    def stored(self) -> list[str | None]:
        return [r.sequence_number for r in self.sent]
