"""A thread-free driver of one ShardMachine for unit tests: processor calls run inline,
checkpoints are answered by a function, time is a number that only moves forward."""

from __future__ import annotations

import random
from collections.abc import Callable

from streamconsumer.core.backoff import Backoff
from streamconsumer.deadletter import DeadLetterWriter, FailedBatch, LetterTooLarge
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    StartPosition,
    StartPositionType,
)
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.calls import (
    Fanout,
    Interrupted,
    MachineParts,
    PartlyFailed,
    call_processor,
    in_turn,
)
from streamconsumer.worker.shard import (
    Answer,
    DeadLetter,
    Finished,
    ProcessorCall,
    SendCheckpoint,
    ShardMachine,
    Skip,
    Wait,
)


def batch(*sequences: int, end: bool = False) -> ReadResult:
    records = [Record(b"d", "k", str(s), checkpoint_sequence=str(s)) for s in sequences]
    return ReadResult(records, millis_behind_latest=0, shard_end=end)


class Drive:
    """Runs one ShardMachine to quiescence on a fake clock: processor calls on `processor`,
    checkpoints answered by `answer` (default: saved)."""

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
    ) -> None:
        self.fanout = fanout  # how a Deliver's groups run under a parallelism
        self.now = 0.0
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
                shard_id="s", epoch=1, start=StartPosition(type=StartPositionType.TRIM_HORIZON)
            ),
            fence_deadline=fence,
            prefetch=10,
            retry=Backoff(base=0.1, cap=30.0, rng=random.Random(0)),
            wants_empty_batches=wants_empty_batches,
            policy=policy,
            parallelism=parallelism,
            batch_size=batch_size,
        )

    def run(self, until: float) -> None:
        machine = self.machine
        while self.now <= until:
            step = machine.next(self.now)
            if isinstance(step, Finished):
                return
            if isinstance(step, Wait):
                if step.until is None or step.until > until:
                    self.now = max(self.now, until)  # nothing happens before `until`
                    return
                self.now = step.until
            elif isinstance(step, SendCheckpoint):
                self.sent.append(step.request)
                machine.answered(self.answer(step.request), self.now)
            elif isinstance(step, Skip):
                self.skipped.append(step)
                machine.returned(self.now)
            elif isinstance(step, DeadLetter) and self.writer is not None:
                self.write(step)
            elif isinstance(step, DeadLetter):
                if self.dead_letter_failures:
                    self.dead_letter_failures -= 1
                    machine.raised(self.now, "target down")
                else:
                    self.dead_letters.append(step)
                    machine.returned(self.now)
            else:
                try:
                    self.call_processor(step)
                except Interrupted as cut:
                    machine.interrupted(cut.done, cut.ahead)
                except PartlyFailed as partly:
                    machine.partly_failed(
                        self.now, partly.done, str(partly), self.wall(), partly.ahead
                    )
                except Exception as error:
                    machine.raised(self.now, str(error), self.wall())
                else:
                    machine.returned(self.now)
            self.now += 0.01

    def wall(self) -> float | None:
        """The wall clock for records' ages: `epoch` seconds at time 0 (None: unknown)."""
        return None if self.epoch is None else self.epoch + self.now

    def write(self, step: DeadLetter) -> None:
        assert self.writer is not None
        records = list(step.batch.records)
        try:
            self.writer.write(FailedBatch("ns/c", "s", records, step.error, step.attempts))
        except LetterTooLarge as refused:
            self.machine.cannot_dead_letter(self.now, str(refused))
        except Exception as error:
            self.machine.raised(self.now, str(error))
        else:
            self.dead_letters.append(step)
            self.machine.returned(self.now)

    def call_processor(self, step: ProcessorCall) -> None:
        call_processor(
            step,
            self.machine,
            self.processor,
            lambda: self.processor,
            self.fanout,
            MachineParts(self.machine, lambda: self.now),  # a processor may move `now` on
        )

    def stored(self) -> list[str | None]:
        return [r.sequence_number for r in self.sent]
