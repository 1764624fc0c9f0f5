"""What `streamconsumer.testing.ProcessorHarness.deliver` runs: one real ShardMachine with
the real `call_processor` and dead-letter encoding, driven by the worker's own driver
(`driver.py`), on a clock of its own. So the harness says what the worker would do with a
batch under a failure policy, without a second copy of the policy that could drift.

Back-offs are not waited: the clock jumps to the end of each (the rng is seeded, so a
run is repeatable), and calls take no time on it. A processor call cannot be
interrupted, so each runs in a thread given `timeoutSeconds` of real time: one still
running then is hung, reported as the worker reports it; the thread is left to run, as
the worker leaves it until its process ends. There are no heartbeats: the fence never
closes and no hand-off comes."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from streamconsumer.core.backoff import Backoff
from streamconsumer.deadletter import DeadLetters, FailedBatch
from streamconsumer.deadletter.base import Letter
from streamconsumer.deliveries import Attempt, Delivery, GivenUp
from streamconsumer.models import Assignment, CheckpointRequest, StartPosition, StartPositionType
from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import SHARD_END, Record, RecordProcessor
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.calls import PartlyFailed
from streamconsumer.worker.driver import Effects, ShardDriver, error_text
from streamconsumer.worker.shard import (
    Answer,
    Call,
    DeadLetter,
    Deliver,
    Initialize,
    ShardMachine,
    Skip,
)

WORKER = "harness"


class _Captured:
    """A dead-letter target that keeps the letters; `limit`: the most bytes one letter's
    JSON may have (an SQS queue's MaximumMessageSize), so a letter over it blocks the
    shard as at a real target."""

    name = "dead-letter target"

    def __init__(self, limit: int | None, letters: list[dict[str, Any]]) -> None:
        self._limit = limit
        self.letters = letters

    def limit(self) -> int:
        return sys.maxsize if self._limit is None else self._limit

    def size(self, letter: Letter) -> int:
        return len(letter.body)

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        self.letters.extend(letter.document for letter in letters)


def failure_policy(policy: FailurePolicy | Mapping[str, Any] | None) -> FailurePolicy:
    """`policy` as the worker gets it: a FailurePolicy, or spec.processor.onFailure as
    written in the resource (camelCase keys), validated by the same model."""
    if policy is None:
        return FailurePolicy()
    if isinstance(policy, FailurePolicy):
        return policy
    return FailurePolicy.model_validate(dict(policy))


class _Hung(BaseException):
    """A call still running after timeoutSeconds: out of the driver, never a failure."""


class HarnessShard(Effects):
    """One shard of one worker, held for the harness's lifetime: the machine (retry
    counts, checkpoint position, a batching processor's unflushed records) carries from
    one delivery to the next, as it does in the worker. It is the driver's host: a clock
    that jumps over back-offs, checkpoints saved at once, letters captured."""

    def __init__(
        self,
        processor: RecordProcessor,
        shard_id: str,
        start_sequence: str | None,
        parents: tuple[str, ...],
        policy: FailurePolicy,
        initialized: bool,
        consumer: str,
        letter_limit: int | None,
    ) -> None:
        if policy.then is AfterRetries.DEAD_LETTER and policy.dead_letter is None:
            # The CRD refuses it; the worker would retry a write it cannot make for ever.
            raise ValueError("then: deadLetter goes with deadLetter (the target)")
        if start_sequence == SHARD_END:
            raise ValueError("the shard has ended: nothing more is delivered from it")
        start = (
            StartPosition(type=StartPositionType.TRIM_HORIZON)
            if start_sequence is None
            else StartPosition(
                type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=start_sequence
            )
        )
        self.policy = policy
        self.clock = 0.0
        self._wall_at_zero = 0.0  # set per delivery: records' ages are on the real clock
        self.machine = ShardMachine(
            WORKER,
            Assignment(shard_id=shard_id, epoch=1, start=start, parents=list(parents)),
            fence_deadline=float("inf"),  # no heartbeats: the fence never closes
            prefetch=1,
            wants_empty_batches=bool(getattr(processor, "wants_empty_batches", False)),
            retry=Backoff(
                base=policy.initial_backoff_seconds,
                cap=policy.max_backoff_seconds,
                rng=random.Random(0),  # the same jitter every run
            ),
            policy=policy,
        )
        self._driver = ShardDriver(self.machine, self, lambda: processor, consumer)
        if initialized:  # (the harness called initialize() already)
            self._driver.processor = processor
        self._letters: list[dict[str, Any]] = []
        target = _Captured(letter_limit, self._letters)
        overflow = _Captured(None, self._letters)
        has_overflow = policy.dead_letter is not None and policy.dead_letter.overflow_s3
        self._dead_letters = DeadLetters(target, DeadLetters(overflow) if has_overflow else None)
        self._delivery = _delivery()
        self.hung: str | None = None

    @property
    def initialized(self) -> bool:
        return self._driver.processor is not None

    def deliver(self, records: list[Record], wall: float) -> Delivery:
        """Runs the machine until it waits for more records, blocks, or a call hangs.
        `wall`: the time now (seconds since the epoch), for records' ages."""
        if self.hung is not None:
            raise RuntimeError(
                f"{self.hung}; the worker restarted: a new harness starts at the last "
                "checkpoint, as the next worker does"
            )
        self._wall_at_zero = wall - self.clock
        self._letters.clear()
        delivery = self._delivery = _delivery()
        self.machine.read(ReadResult(list(records), millis_behind_latest=0))
        with contextlib.suppress(_Hung):
            self._driver.drive()
        delivery.letters = list(self._letters)
        passed = {r.position for r in (*delivery.done, *delivery.skipped, *delivery.dead_lettered)}
        delivery.left = [r for r in records if r.position not in passed]
        return delivery

    # --- the driver's effects -------------------------------------------------------------

    def now(self) -> float:
        return self.clock

    def wall(self) -> float:
        return self._wall_at_zero + self.clock

    def proceed(self) -> bool:
        return self._delivery.blocked is None

    def wait(self, until: float | None) -> bool:
        if until is None:
            return False  # every record is through: it waits for the next read
        self.clock = max(self.clock, until)  # a back-off, not waited
        return True

    def checkpoint(self, request: CheckpointRequest) -> Answer:
        sequence = request.sequence_number
        assert sequence is not None, "no release without a hand-off"
        self._delivery.checkpoints.append(sequence)
        return Answer.SAVED

    def write(self, batch: FailedBatch) -> None:
        self._dead_letters.write(batch)

    def call(self, make: Callable[[], RecordProcessor]) -> RecordProcessor:
        """The call in a thread given timeoutSeconds of real time: one still running then
        is hung, reported as the worker reports it, and left to run."""
        outcome: list[RecordProcessor | BaseException] = []

        def calling() -> None:
            try:
                outcome.append(make())
            except BaseException as error:  # handed over to the harness's thread
                outcome.append(error)

        machine = self.machine
        thread = threading.Thread(target=calling, name=f"processor {machine.shard_id}", daemon=True)
        thread.start()
        thread.join(self.policy.timeout_seconds)
        if not outcome:
            self._hung()
        (result,) = outcome
        if isinstance(result, BaseException):
            raise result
        return result

    def _hung(self) -> NoReturn:
        machine, delivery = self.machine, self._delivery
        started = machine.call_started
        assert started is not None
        self.clock = started + self.policy.timeout_seconds
        failing = machine.held(self.clock).failing
        assert machine.hung(self.clock)
        assert failing is not None
        self.hung = delivery.hung = failing.error
        call = machine.call
        if isinstance(call, Deliver):
            delivery.attempts.append(Attempt(list(call.batch.records), self.hung))
        raise _Hung

    def settled(self, step: Call, error: Exception | None) -> None:
        delivery = self._delivery
        if isinstance(step, (Skip, DeadLetter)):
            if error is None:
                records = list(step.batch.records)
                action = "skip" if isinstance(step, Skip) else "deadLetter"
                (delivery.skipped if action == "skip" else delivery.dead_lettered).extend(records)
                delivery.given_up.append(GivenUp(action, records, step.error, step.attempts))
            self._blocked()
            return
        records = list(step.batch.records) if isinstance(step, Deliver) else []
        if isinstance(step, Deliver):
            text = None if error is None else str(error)
            if error is not None and not isinstance(error, PartlyFailed):
                text = error_text(error)  # as the worker reports it
            delivery.attempts.append(Attempt(records, text))
        if isinstance(step, Initialize) and error is not None:
            raise error  # the worker retries it for ever: fix it first
        # What the machine counts done, not what the call claimed: a partial response
        # that checkpointed past its first failed record counts as failed whole.
        last = self.machine.progress.done
        if last is not None:
            delivery.done.extend(r for r in records if r.position <= last.position)
        self._blocked()

    def _blocked(self) -> None:
        """Stops at the failure that blocks the shard: the worker would retry on for ever.
        So does a call failing past its retries that the policy cannot pass over (an
        empty batch: nothing to skip), which the worker retries for ever unflagged."""
        failing = self.machine.held(self.clock).failing
        if failing is None:
            return
        if failing.blocked or failing.attempts > self.policy.retries + 1:
            self._delivery.blocked = failing.error


def _delivery() -> Delivery:
    return Delivery([], [], [], [], [], [], [], None, None, [])
