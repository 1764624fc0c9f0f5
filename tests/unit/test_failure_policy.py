"""The failure policy in the ShardMachine (issue 13.2): retries first, then block, skip
or dead-letter; only failed batches are passed over, and never a record before them that
a processor has not checkpointed."""

from __future__ import annotations

import pytest

from streamconsumer.deadletter import DeadLetters
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.shard import Stop

from .letter_targets import StubTarget
from .shard_drive import Drive, batch

SQS_LIMIT = 256 * 1024


class Poisoned(BaseRecordProcessor):
    """Raises on any batch holding a poison sequence; checkpoints every `every` batches."""

    def __init__(self, poison: set[str], every: int = 1) -> None:
        self.poison = poison
        self.every = every
        self.calls = 0
        self.done: list[str] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if any(r.sequence_number in self.poison for r in records):
            raise ValueError("cannot parse")
        self.done += [r.sequence_number for r in records]
        self.calls += 1
        if self.calls % self.every == 0:
            checkpointer.checkpoint()


def policy(then: str, **extra: object) -> FailurePolicy:
    target = {"deadLetter": {"sqs": {"queueURL": "http://q"}}} if then == "deadLetter" else {}
    return FailurePolicy.model_validate({"then": then, "retries": 2, **target, **extra})


def driven(
    processor: Poisoned, policy: FailurePolicy, *batches: ReadResult, until: float = 120
) -> Drive:
    """`processor` under `policy` given `batches`, the machine run to `until` seconds."""
    drive = Drive(processor, policy=policy)
    for result in batches:
        drive.machine.read(result)
    drive.run(until=until)
    return drive


def test_block_retries_for_ever_and_reports_the_shard_blocked() -> None:
    processor = Poisoned({"2"})
    drive = driven(processor, policy("block"), batch(1), batch(2), batch(3))
    assert processor.done == ["1"], "nothing after the poison"
    failing = drive.machine.held(drive.clock).failing
    assert failing is not None
    assert failing.blocked
    assert failing.attempts > 3
    assert "cannot parse" in failing.error
    assert drive.stored() == ["1"]


def test_skip_passes_the_batch_over_after_its_retries_and_says_so() -> None:
    processor = Poisoned({"2"})
    drive = driven(processor, policy("skip"), batch(1), batch(2), batch(3))
    assert processor.done == ["1", "3"]
    assert [s.attempts for s in drive.skipped] == [3], "the first try and two retries"
    assert drive.stored() == ["1", "2", "3"], "the checkpoint moves past the skipped batch"
    (note,) = drive.machine.held(drive.clock).passed_over
    assert (note.action, note.first_sequence, note.count) == ("skip", "2", 1)
    assert drive.machine.held(drive.clock).failing is None


def test_a_heartbeat_answer_clears_the_reported_notes() -> None:
    drive = driven(Poisoned({"2"}), policy("skip"), batch(2))
    held = drive.machine.held(drive.clock)
    drive.machine.reported(held)
    assert drive.machine.held(drive.clock).passed_over == []


def test_retry_for_seconds_ends_retries_before_their_count() -> None:
    drive = driven(
        Poisoned({"1"}), policy("skip", retries=1000, retryForSeconds=5), batch(1), until=60
    )
    assert len(drive.skipped) == 1
    assert drive.skipped[0].attempts < 1000


def test_dead_letters_are_written_before_the_checkpoint_moves_and_retried() -> None:
    processor = Poisoned({"2"})
    drive = Drive(processor, policy=policy("deadLetter"), dead_letter_failures=2)
    for result in (batch(1), batch(2, 3), batch(4)):
        drive.machine.read(result)
    drive.run(until=120)
    (written,) = drive.dead_letters
    assert [r.sequence_number for r in written.batch.records] == ["2"], "3 is fine"
    assert "cannot parse" in written.error
    assert processor.done == ["1", "3", "4"]
    assert drive.stored() == ["1", "2", "3", "4"]


def test_a_failing_batch_is_bisected_down_to_the_records_that_fail() -> None:
    processor = Poisoned({"5", "6"})
    drive = driven(processor, policy("skip"), batch(*range(1, 17)), until=300)
    assert [[r.sequence_number for r in s.batch.records] for s in drive.skipped] == [["5"], ["6"]]
    assert processor.done == [str(i) for i in range(1, 17) if i not in (5, 6)]
    assert drive.stored()[-1] == "16"


def test_records_a_processor_has_not_checkpointed_keep_the_checkpoint_back() -> None:
    """A batching processor returned for 1 and 2 but checkpoints every third call: the
    skip of 3 must not store a checkpoint that covers 1 and 2 on the processor's behalf."""
    drive = driven(Poisoned({"3"}, every=3), policy("skip"), batch(1), batch(2), batch(3))
    assert len(drive.skipped) == 1
    assert drive.stored() == [], "nothing checkpointed yet"


@pytest.mark.parametrize("then", ["block", "skip", "deadLetter"])
def test_a_handoff_interrupts_the_retries(then: str) -> None:
    drive = Drive(Poisoned({"2"}), policy=policy(then, retries=1000))
    for result in (batch(1), batch(2)):
        drive.machine.read(result)
    drive.run(until=10)
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=20)
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "1"
    assert not drive.skipped
    assert not drive.dead_letters


def large(sequence: int, size: int) -> ReadResult:
    """One record of `size` bytes: its dead letter, base64 in JSON, is a third larger."""
    record = Record(b"x" * size, "k", str(sequence), checkpoint_sequence=str(sequence))
    return ReadResult([record], millis_behind_latest=0)


def test_a_dead_letter_that_can_never_fit_blocks_the_shard_and_says_why() -> None:
    """A 200 KiB record is over 256 KiB as a dead letter: retrying the write cannot help,
    so the shard blocks as under `block` (reported, the processor retried), never
    retrying the write for ever unreported."""
    processor = Poisoned({"2"})
    queue = StubTarget("SQS message", SQS_LIMIT)
    writer = DeadLetters(queue)
    drive = Drive(processor, policy=policy("deadLetter"), dead_letter_writer=writer)
    for result in (batch(1), large(2, 200 * 1024), batch(3)):
        drive.machine.read(result)
    drive.run(until=120)
    assert queue.requests == 0, "nothing sent that cannot fit"
    assert processor.done == ["1"]
    assert drive.stored() == ["1"], "nothing passed over"
    failing = drive.machine.held(drive.clock).failing
    assert failing is not None
    assert failing.blocked, "the heartbeat reports it, so Degraded names it"
    assert "record 2 " in failing.error
    assert f"over the SQS message limit of {SQS_LIMIT} bytes" in failing.error
    assert "cannot parse" in failing.error
    attempts = failing.attempts
    drive.run(until=240)
    held = drive.machine.held(drive.clock).failing
    assert held is not None
    assert held.attempts > attempts, "the processor is retried, as under block"

    processor.poison.clear()  # fixed (a new version of its dependency, say)
    drive.run(until=400)
    assert processor.done == ["1", "2", "3"]
    assert drive.machine.held(drive.clock).failing is None
    assert drive.stored()[-1] == "3"


def test_a_dead_letter_too_large_for_its_target_goes_to_the_overflow() -> None:
    processor = Poisoned({"2", "3"})
    queue = StubTarget("SQS message", SQS_LIMIT)
    bucket = StubTarget("S3 object", 5 * 1024**3)
    writer = DeadLetters(queue, overflow=DeadLetters(bucket))
    drive = Drive(processor, policy=policy("deadLetter"), dead_letter_writer=writer)
    for result in (batch(1), large(2, 200 * 1024), batch(3), batch(4)):
        drive.machine.read(result)
    drive.run(until=120)
    assert [letter.record.sequence_number for letter in bucket.sent] == ["2"]
    assert [letter.record.sequence_number for letter in queue.sent] == ["3"]
    assert processor.done == ["1", "4"]
    assert drive.stored()[-1] == "4"
    assert drive.machine.held(drive.clock).failing is None


def test_a_poison_batch_bisected_to_its_records_is_one_note_per_heartbeat() -> None:
    """Issue 22.13: a note per passed-over piece made heartbeats of thousands of notes."""
    drive = driven(
        Poisoned({"1", "2", "3", "4", "5"}), policy("skip"), batch(1, 2, 3, 4, 5), until=300
    )
    assert len(drive.skipped) > 1, "bisected"
    held = drive.machine.held(drive.clock)
    (note,) = held.passed_over
    assert (note.first_sequence, note.last_sequence, note.count) == ("1", "5", 5)
    drive.machine.read(batch(6))
    drive.processor.poison.add("6")  # type: ignore[attr-defined]
    drive.run(until=600)
    sent, later = drive.machine.held(drive.clock).passed_over
    assert sent == note, "a note in flight is not added to"
    assert later.count == 1
    drive.machine.reported(held)
    assert drive.machine.held(drive.clock).passed_over == [later]
