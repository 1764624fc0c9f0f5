"""What `streamconsumer.testing.ProcessorHarness.deliver` runs: one real ShardMachine with
the real `call_processor` and dead-letter encoding, driven as `worker/runtime.py` drives
them, but on a clock of its own. So the harness says what the worker would do with a
batch under a failure policy, without a second copy of the policy that could drift.

Back-offs are not waited: the clock jumps to the end of each (the rng is seeded, so a
run is repeatable), and calls take no time on it. A processor call cannot be
interrupted, so each runs in a thread given `timeoutSeconds` of real time: one still
running then is hung, reported as the worker reports it; the thread is left to run, as
the worker leaves it until its process ends. There are no heartbeats: the fence never
closes and no hand-off comes."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from streamconsumer.core.backoff import Backoff
from streamconsumer.deadletter import DeadLetters, FailedBatch, LetterTooLarge
from streamconsumer.deadletter.base import Letter
from streamconsumer.models import Assignment, StartPosition, StartPositionType
from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import SHARD_END, Record, RecordProcessor
from streamconsumer.sources.base import ReadResult
from streamconsumer.testing import Attempt, Delivery, GivenUp
from streamconsumer.worker.calls import PartlyFailed, call_processor
from streamconsumer.worker.shard import (
    Answer,
    DeadLetter,
    Deliver,
    Finished,
    Initialize,
    ProcessorCall,
    SendCheckpoint,
    ShardMachine,
    Skip,
    Wait,
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


class ShardDriver:
    """One shard of one worker, held for the harness's lifetime: the machine (retry
    counts, checkpoint position, a batching processor's unflushed records) carries from
    one delivery to the next, as it does in the worker."""

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
        self.now = 0.0
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
        self._factory: Callable[[], RecordProcessor] = lambda: processor
        self._processor: RecordProcessor | None = processor if initialized else None
        self._consumer = consumer
        self._letters: list[dict[str, Any]] = []
        target = _Captured(letter_limit, self._letters)
        overflow = _Captured(None, self._letters)
        has_overflow = policy.dead_letter is not None and policy.dead_letter.overflow_s3
        self._dead_letters = DeadLetters(target, DeadLetters(overflow) if has_overflow else None)
        self.hung: str | None = None

    @property
    def initialized(self) -> bool:
        return self._processor is not None

    def deliver(self, records: list[Record], wall: float) -> Delivery:
        """Runs the machine until it waits for more records, blocks, or a call hangs.
        `wall`: the time now (seconds since the epoch), for records' ages."""
        if self.hung is not None:
            raise RuntimeError(
                f"{self.hung}; the worker restarted: a new harness starts at the last "
                "checkpoint, as the next worker does"
            )
        machine = self.machine
        self._wall_at_zero = wall - self.now
        self._letters.clear()
        delivery = Delivery([], [], [], [], [], self._letters, [], None, None, [])
        machine.read(ReadResult(list(records), millis_behind_latest=0))
        while delivery.blocked is None and delivery.hung is None:
            step = machine.next(self.now)
            if isinstance(step, Wait):
                if step.until is None:
                    break  # every record is through: it waits for the next read
                self.now = max(self.now, step.until)  # a back-off, not waited
            elif isinstance(step, Finished):
                break
            elif isinstance(step, SendCheckpoint):
                sequence = step.request.sequence_number
                assert sequence is not None, "no release without a hand-off"
                delivery.checkpoints.append(sequence)
                machine.answered(Answer.SAVED, self.now)
            elif isinstance(step, Skip):
                skipped = list(step.batch.records)
                delivery.skipped.extend(skipped)
                delivery.given_up.append(GivenUp("skip", skipped, step.error, step.attempts))
                machine.returned(self.now)
            elif isinstance(step, DeadLetter):
                self._dead_letter(step, delivery)
            else:
                self._call(step, delivery)
        delivery.letters = list(self._letters)
        passed = {r.position for r in (*delivery.done, *delivery.skipped, *delivery.dead_lettered)}
        delivery.left = [r for r in records if r.position not in passed]
        return delivery

    def _wall(self) -> float:
        return self._wall_at_zero + self.now

    def _blocked(self, delivery: Delivery) -> None:
        """Stops at the failure that blocks the shard: the worker would retry on for ever.
        So does a call failing past its retries that the policy cannot pass over (an
        empty batch: nothing to skip), which the worker retries for ever unflagged."""
        failing = self.machine.held(self.now).failing
        if failing is None:
            return
        if failing.blocked or failing.attempts > self.policy.retries + 1:
            delivery.blocked = failing.error

    def _dead_letter(self, step: DeadLetter, delivery: Delivery) -> None:
        records = list(step.batch.records)
        batch = FailedBatch(
            self._consumer, self.machine.shard_id, records, step.error, step.attempts
        )
        try:
            self._dead_letters.write(batch)
        except LetterTooLarge as refused:
            self.machine.cannot_dead_letter(self.now, str(refused))
            self._blocked(delivery)
            return
        delivery.dead_lettered.extend(records)
        delivery.given_up.append(GivenUp("deadLetter", records, step.error, step.attempts))
        self.machine.returned(self.now)

    def _call(self, step: ProcessorCall, delivery: Delivery) -> None:
        machine = self.machine
        outcome: list[RecordProcessor | BaseException] = []

        def call() -> None:
            try:
                outcome.append(call_processor(step, machine, self._processor, self._factory))
            except BaseException as error:  # handed over to the harness's thread
                outcome.append(error)

        thread = threading.Thread(target=call, name=f"processor {machine.shard_id}", daemon=True)
        thread.start()
        thread.join(self.policy.timeout_seconds)
        if not outcome:
            started = machine.call_started
            assert started is not None
            self.now = started + self.policy.timeout_seconds
            failing = machine.held(self.now).failing
            assert machine.hung(self.now)
            assert failing is not None
            self.hung = delivery.hung = failing.error
            if isinstance(step, Deliver):
                delivery.attempts.append(Attempt(list(step.batch.records), self.hung))
            return
        (result,) = outcome
        records = list(step.batch.records) if isinstance(step, Deliver) else []
        if isinstance(result, PartlyFailed):
            delivery.attempts.append(Attempt(records, str(result)))
            machine.partly_failed(self.now, result.done, str(result), self._wall())
        elif isinstance(result, Exception):
            error = f"{type(result).__name__}: {result}"  # as the worker reports it
            if isinstance(step, Deliver):
                delivery.attempts.append(Attempt(records, error))
            machine.raised(self.now, error, wall=self._wall())
            if isinstance(step, Initialize):
                raise result  # the worker retries it for ever: fix it first
        elif isinstance(result, BaseException):
            raise result  # KeyboardInterrupt and the like end the worker too
        else:
            self._processor = result
            if isinstance(step, Deliver):
                delivery.attempts.append(Attempt(records, None))
            machine.returned(self.now)
        # What the machine counts done, not what the call claimed: a partial response
        # that checkpointed past its first failed record counts as failed whole.
        last = machine.progress.done
        if last is not None:
            delivery.done.extend(r for r in records if r.position <= last.position)
        self._blocked(delivery)
