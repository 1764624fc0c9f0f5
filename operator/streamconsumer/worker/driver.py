"""The one driver of a ShardMachine: it turns each step into its effect (a processor
call, a checkpoint sent, dead letters written, a wait) and tells the machine what came
of it. Every host runs it: the threaded runtime (`runtime.py`), the test harness
(`harness.py`), the simulation and the unit tests' drive. What differs between them, the
clock, the lock, threads and I/O, comes through the `Effects` port, so each outcome
(returned, raised, partly failed, interrupted, skipped, dead-lettered, a letter too
large) is handled here once, as production handles it.

A host whose effects complete at once runs `drive` until the machine waits. A host
whose effects complete later (the simulation: calls take simulated time, answers cross
its network) says so: `Effects.begin` and `Effects.wait` return False, and the host
calls `perform`, `answered` and `drive` when their time comes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from streamconsumer.deadletter.base import FailedBatch, LetterTooLarge
from streamconsumer.models import CheckpointRequest
from streamconsumer.processor import ProcessorFactory, RecordProcessor
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
    Call,
    DeadLetter,
    Deliver,
    Finished,
    Outcome,
    SendCheckpoint,
    ShardMachine,
    Skip,
    Wait,
)


def error_text(error: BaseException) -> str:
    """A failure as the worker reports it (Degraded, Events, the harness)."""
    return f"{type(error).__name__}: {error}"


class Effects(Protocol):
    """What a host gives the driver. The defaults are a host's without threads whose
    effects complete at once; `now`, `checkpoint` and `write` are each host's own."""

    # Held around every call into the machine (the runtime's, shared with the reader).
    lock: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    passes: tuple[type[Exception], ...] = ()  # the host's own errors: never a processor's

    def now(self) -> float:
        """The machine's clock (monotonic seconds)."""
        ...

    def wall(self) -> float | None:
        """Seconds since the epoch, for records' ages (None: unknown)."""
        return None

    def proceed(self) -> bool:
        """Under the lock, before each step: go on stepping?"""
        return True

    def wait(self, until: float | None) -> bool:
        """Under the lock: the machine waits until `until` (None: until told). True once
        waited (step again); False to return, the host calling `drive` later."""
        return False

    def begin(self, step: Call) -> bool:
        """Under the lock: `step` is the call in flight now. True to make it at once;
        False when the host calls `perform(step)` itself later."""
        return True

    def call(self, make: Callable[[], RecordProcessor]) -> RecordProcessor:
        """Makes a processor call: `make()` (a host may give it a thread and a timeout)."""
        return make()

    def checkpoint(self, request: CheckpointRequest) -> Answer | None:
        """Sends a checkpoint or release; None when the answer comes later (`answered`)."""
        ...

    def write(self, batch: FailedBatch) -> None:
        """Writes dead letters; raises as `DeadLetterWriter.write` does."""
        ...

    def settled(self, step: Call, error: Exception | None) -> None:
        """The machine has heard how `step` ended (`error`: Interrupted, PartlyFailed,
        LetterTooLarge, or what the call raised): metrics, logs, ledgers."""
        return None

    def finished(self, outcome: Outcome) -> None:
        """Under the lock: the machine let its shard go."""
        return None


class ShardDriver:
    """Drives one ShardMachine through `effects`; holds the shard's processor."""

    def __init__(
        self,
        machine: ShardMachine,
        effects: Effects,
        factory: ProcessorFactory,
        consumer: str,
        fanout: Fanout = in_turn,
    ) -> None:
        self.machine = machine
        self.processor: RecordProcessor | None = None  # made by the Initialize call
        self._effects = effects
        self._factory = factory
        self._consumer = consumer  # namespace/name, in dead letters
        self._fanout = fanout
        self._parts = MachineParts(machine, effects.now, effects.lock)

    def drive(self) -> Outcome | None:
        """Steps until the machine finishes (its outcome) or the host defers (None)."""
        effects, machine = self._effects, self.machine
        while True:
            with effects.lock:
                if not effects.proceed():
                    return None
                step = machine.next(effects.now())
                if isinstance(step, Wait):
                    if effects.wait(step.until):
                        continue
                    return None
                if isinstance(step, Finished):
                    effects.finished(step.outcome)
                    return step.outcome
                if not isinstance(step, SendCheckpoint) and not effects.begin(step):
                    return None
            if isinstance(step, SendCheckpoint):
                answer = effects.checkpoint(step.request)
                if answer is None:
                    return None
                self.answered(answer)
            else:
                self.perform(step)

    def answered(self, answer: Answer) -> None:
        """The answer to the checkpoint of the last SendCheckpoint."""
        with self._effects.lock:
            self.machine.answered(answer, self._effects.now())

    def perform(self, step: Call) -> None:
        """Makes the call `step` and tells the machine how it ended."""
        effects = self._effects
        try:
            if isinstance(step, DeadLetter):
                records = list(step.batch.records)
                shard = self.machine.shard_id
                effects.write(
                    FailedBatch(self._consumer, shard, records, step.error, step.attempts)
                )
            elif not isinstance(step, Skip):
                self.processor = effects.call(lambda: self._call(step))
        except effects.passes:
            raise
        except Exception as error:
            self.failed(step, error)
            effects.settled(step, error)
            return
        with effects.lock:
            self.machine.returned(effects.now())
        effects.settled(step, None)

    def _call(self, step: Call) -> RecordProcessor:
        assert not isinstance(step, (Skip, DeadLetter))
        machine = self.machine
        return call_processor(
            step, machine, self.processor, self._factory, self._fanout, self._parts
        )

    def failed(self, step: Call, error: Exception) -> None:
        """Tells the machine how `step` failed: cut short, partly failed, a letter too
        large for its target, or raised."""
        effects, machine = self._effects, self.machine
        with effects.lock:
            now = effects.now()
            if isinstance(error, LetterTooLarge) and isinstance(step, DeadLetter):
                machine.cannot_dead_letter(now, str(error))
            elif isinstance(error, Interrupted) and isinstance(step, Deliver):
                machine.interrupted(error.done, error.ahead)
            elif isinstance(error, PartlyFailed) and isinstance(step, Deliver):
                machine.partly_failed(now, error.done, str(error), effects.wall(), error.ahead)
            else:
                machine.raised(now, error_text(error), effects.wall())
