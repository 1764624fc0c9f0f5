"""onFailure.maxRecordAgeSeconds (issue 29, as Lambda's MaximumRecordAgeInSeconds): a
failing batch's records that arrived longer ago than the limit are not retried but go
to skip or dead-letter at once; younger records are retried as before, and nothing is
passed over that did not fail."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult

from .shard_drive import Drive

NOW = 1_800_000_000.0  # the wall clock when the drive starts


def aged(*ages: tuple[int, float | None]) -> ReadResult:
    """Records (sequence, seconds before NOW it arrived; None: no arrival time)."""
    records = [
        Record(
            b"d",
            "k",
            str(sequence),
            approximate_arrival_timestamp=None
            if age is None
            else datetime.fromtimestamp(NOW - age, UTC),
            checkpoint_sequence=str(sequence),
        )
        for sequence, age in ages
    ]
    return ReadResult(records, millis_behind_latest=0)


class Failing(BaseRecordProcessor):
    """Raises on any batch holding a poison sequence, until `heals_at` calls."""

    def __init__(self, poison: set[str], heals_at: int = 10**9) -> None:
        self.poison = poison
        self.heals_at = heals_at
        self.calls: list[list[str]] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.calls.append([r.sequence_number for r in records])
        if len(self.calls) < self.heals_at and any(
            r.sequence_number in self.poison for r in records
        ):
            raise ValueError("cannot parse")
        checkpointer.checkpoint()


def drive(processor: BaseRecordProcessor, result: ReadResult, **policy: object) -> Drive:
    target = (
        {"deadLetter": {"sqs": {"queueURL": "http://q"}}} if policy["then"] == "deadLetter" else {}
    )
    drive = Drive(
        processor,
        policy=FailurePolicy.model_validate({"retries": 5, **policy, **target}),
    )
    drive.epoch = NOW
    drive.machine.read(result)
    drive.run(until=300)
    return drive


@pytest.mark.parametrize("then", ["skip", "deadLetter"])
def test_old_records_of_a_failing_batch_are_not_retried(then: str) -> None:
    processor = Failing({"1"})
    run = drive(processor, aged((1, 120), (2, 90)), then=then, maxRecordAgeSeconds=60)
    assert processor.calls == [["1", "2"]], "one attempt, no retries, no bisecting"
    given_up = run.skipped or run.dead_letters
    (step,) = given_up
    assert [r.sequence_number for r in step.batch.records] == ["1", "2"]
    assert "older than maxRecordAgeSeconds 60" in step.error
    assert "cannot parse" in step.error
    assert run.stored() == ["2"]


def test_the_younger_rest_of_the_batch_is_retried_as_before() -> None:
    processor = Failing({"1", "3"}, heals_at=4)
    run = drive(processor, aged((1, 120), (2, 30), (3, 10)), then="skip", maxRecordAgeSeconds=60)
    assert [[r.sequence_number for r in s.batch.records] for s in run.skipped] == [["1"]]
    assert processor.calls[0] == ["1", "2", "3"]
    assert processor.calls[1:] == [["2", "3"], ["2", "3"], ["2", "3"]], "retried, then done"
    assert run.stored() == ["1", "3"]


def test_records_age_while_they_are_retried() -> None:
    """Young at the first failure, old at a later one: retries stop then."""
    processor = Failing({"1"})
    run = drive(processor, aged((1, 55)), then="skip", maxRecordAgeSeconds=60, retries=1000)
    assert len(run.skipped) == 1
    assert 1 < len(processor.calls) < 1000
    assert run.clock > 5


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ({"then": "skip"}, "no limit by default"),
        ({"then": "skip", "maxRecordAgeSeconds": 600}, "younger than the limit"),
    ],
)
def test_young_records_and_no_limit_keep_the_retries(policy: dict[str, object], why: str) -> None:
    processor = Failing({"1"})
    run = drive(processor, aged((1, 120)), **policy)
    assert len(processor.calls) == 6, f"{why}: the first try and five retries"
    assert len(run.skipped) == 1


def test_a_record_without_an_arrival_time_is_never_too_old() -> None:
    processor = Failing({"1"})
    run = drive(processor, aged((1, None)), then="skip", maxRecordAgeSeconds=1)
    assert len(processor.calls) == 6
    assert "older than" not in run.skipped[0].error


def test_a_succeeding_old_batch_is_simply_processed() -> None:
    processor = Failing(set())
    run = drive(processor, aged((1, 1e6)), then="skip", maxRecordAgeSeconds=1)
    assert run.skipped == []
    assert run.stored() == ["1"]


def test_a_dead_letter_target_down_is_retried_without_calling_the_processor_again() -> None:
    processor = Failing({"1"})
    run = Drive(
        processor,
        policy=FailurePolicy.model_validate(
            {
                "then": "deadLetter",
                "deadLetter": {"sqs": {"queueURL": "http://q"}},
                "maxRecordAgeSeconds": 60,
            }
        ),
        dead_letter_failures=3,
    )
    run.epoch = NOW
    run.machine.read(aged((1, 120), (2, 10)))
    run.run(until=300)
    assert processor.calls == [["1", "2"], ["2"]]
    assert [[r.sequence_number for r in d.batch.records] for d in run.dead_letters] == [["1"]]


def test_the_limit_goes_only_with_a_policy_that_passes_records_over() -> None:
    FailurePolicy.model_validate({"then": "skip", "maxRecordAgeSeconds": 60})
    with pytest.raises(ValidationError):
        FailurePolicy.model_validate({"then": "skip", "maxRecordAgeSeconds": 0})


def test_block_never_passes_a_record_over_however_old() -> None:
    """The CRD refuses the pair; a policy built otherwise still blocks."""
    processor = Failing({"1"})
    run = drive(processor, aged((1, 1e6)), then="block", maxRecordAgeSeconds=1)
    assert run.skipped == []
    assert len(processor.calls) > 6
