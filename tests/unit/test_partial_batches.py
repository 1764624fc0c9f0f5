"""Partial batch responses (issue 29, as Lambda's ReportBatchItemFailures): a processor
names the records that failed; the ones before the first failed record are done and
never delivered again, the rest go through the failure policy as a batch that raised.
A result that does not fit its batch fails the whole batch, never skips a record."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import (
    BaseRecordProcessor,
    BatchResult,
    BatchResultError,
    Checkpointer,
    CheckpointError,
    FunctionProcessor,
    ProcessResult,
    Progress,
    Record,
    first_failed,
)
from streamconsumer.testing import ProcessorHarness
from streamconsumer.worker.shard import Stop

from .shard_drive import Drive, batch
from .test_shard_machine import run_threaded

Answer = Callable[[list[Record], int], object]


class Reporting(BaseRecordProcessor):
    """Hands each call's records and its call number to `answer` and returns what it
    says; records every delivery. Checkpoints the records before the first it reports
    failed, as a well-behaved processor does (`checkpoint_all`: everything instead)."""

    def __init__(self, answer: Answer, checkpoint_all: bool = False) -> None:
        self.answer = answer
        self.checkpoint_all = checkpoint_all
        self.calls: list[list[str]] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        self.calls.append([r.sequence_number for r in records])
        result = self.answer(records, len(self.calls))
        if self.checkpoint_all:
            checkpointer.checkpoint()
        else:
            try:
                done = first_failed(records, result)
            except BatchResultError:
                done = 0
            if done:
                checkpointer.checkpoint(records[done - 1])
        return result  # type: ignore[return-value]  # hostile results on purpose


def run(processor: BaseRecordProcessor, *sequences: int, then: str = "block") -> Drive:
    extra = {"deadLetter": {"sqs": {"queueURL": "http://q"}}} if then == "deadLetter" else {}
    drive = Drive(processor, policy=FailurePolicy.model_validate({"then": then, **extra}))
    drive.machine.read(batch(*sequences))
    drive.run(until=120)
    return drive


def once(*failed: str) -> Answer:
    """Reports `failed` on the first call only."""
    return lambda records, call: BatchResult(failed=list(failed)) if call == 1 else None


def test_the_records_before_the_first_failed_one_are_done_and_never_delivered_again() -> None:
    processor = Reporting(once("3", "5"))
    drive = run(processor, 1, 2, 3, 4, 5)
    assert processor.calls == [["1", "2", "3", "4", "5"], ["3", "4", "5"]]
    assert drive.stored() == ["2", "5"], "checkpointed past 1-2 at once, then the rest"
    assert drive.machine.held(drive.clock).failing is None


def test_a_plain_list_of_records_or_sequence_numbers_is_a_batch_result() -> None:
    processor = Reporting(
        lambda records, call: BatchResult(failed=[records[3], "5"]) if call == 1 else None
    )
    drive = run(processor, 1, 2, 3, 4, 5)
    assert processor.calls == [["1", "2", "3", "4", "5"], ["4", "5"]]
    assert drive.stored() == ["3", "5"]


def test_the_whole_batch_reported_failed_is_retried_as_if_it_raised() -> None:
    processor = Reporting(
        lambda records, call: BatchResult(failed=[r.sequence_number for r in records])
    )
    drive = run(processor, 1, 2, 3)
    assert all(call == ["1", "2", "3"] for call in processor.calls)
    failing = drive.machine.held(drive.clock).failing
    assert failing is not None
    assert failing.blocked, "block: the retries used up, nothing passed over"
    assert "3 of 3 records failed" in failing.error
    assert drive.stored() == []


@pytest.mark.parametrize("empty", [None, [], (), BatchResult(), BatchResult(failed=[])])
def test_none_or_nothing_failed_is_the_whole_batch_done(empty: object) -> None:
    processor = Reporting(lambda records, call: empty)
    drive = run(processor, 1, 2)
    assert processor.calls == [["1", "2"]]
    assert drive.stored() == ["2"]


def test_duplicates_name_the_same_record_once() -> None:
    processor = Reporting(once("2", "2", "3", "2"))
    drive = run(processor, 1, 2, 3)
    assert processor.calls == [["1", "2", "3"], ["2", "3"]]
    assert drive.stored() == ["1", "3"]


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (BatchResult(failed=["99"]), "record 99 failed, which is not in its batch"),
        (BatchResult(failed=["2", "99"]), "record 99 failed, which is not in its batch"),
        (BatchResult(failed=[2]), "reported a failed int"),  # type: ignore[list-item]
        (BatchResult(failed="2"), "BatchResult.failed is a str"),
        (BatchResult(failed=iter(["2"])), "BatchResult.failed is a list_iterator"),  # type: ignore[arg-type]
        (BatchResult(failed=[None]), "reported a failed NoneType"),  # type: ignore[list-item]
    ],
)
def test_a_result_that_does_not_fit_fails_the_whole_batch(result: object, says: str) -> None:
    """Never read as a success, and an unknown name never as a skip: the batch is
    retried whole, and the policy (here skip) passes over only what fails on its own."""
    processor = Reporting(lambda records, call: result if call <= 4 else None)
    drive = run(processor, 1, 2, 3, then="skip")
    assert processor.calls[:4] == [["1", "2", "3"]] * 4, "the first try and three retries"
    assert drive.stored()[-1] == "3"
    assert drive.skipped == [], "once it returns None nothing is passed over"
    with pytest.raises(BatchResultError, match=says):
        first_failed(batch(1, 2, 3).records, result)


def test_a_checkpoint_past_the_first_failed_record_fails_the_whole_call() -> None:
    processor = Reporting(once("2"), checkpoint_all=True)
    drive = run(processor, 1, 2, 3)
    assert processor.calls == [["1", "2", "3"], ["1", "2", "3"]], "nothing counted done"
    assert drive.stored() == ["3"]


def test_a_checkpoint_at_a_failed_part_of_an_aggregate_fails_the_whole_call() -> None:
    """Inside a KPL aggregate a checkpoint's sequence number stays at the aggregate
    before, whichever part it names: naming a part reported failed must still count as
    past the first failed record. Let through, it made the parts from there look
    checkpointed, and records passed over later (a filter's, a skip's) moved the
    checkpoint past them while a batching processor had not flushed them."""
    parts = [
        Record(
            b"d", "k", "20", sub_sequence_number=sub, checkpoint_sequence="20" if sub == 3 else "10"
        )
        for sub in range(4)
    ]
    progress = Progress("s", start_sequence="10")
    progress.begin(parts)
    Checkpointer(progress).checkpoint(parts[2])
    with pytest.raises(CheckpointError, match="reported records"):
        progress.partly_returned(parts[0])  # parts 1-3 failed
    progress.begin(parts[1:])
    progress.returned()  # delivered again, done, not flushed (no checkpoint)
    progress.passed_over([Record(b"d", "k", "30", checkpoint_sequence="30")])
    assert progress.requested == "10", "nothing past the unflushed parts 1-3"


def test_skip_passes_over_only_the_record_that_keeps_failing() -> None:
    """A poison record reported failed on every call: retried from it, then bisected
    down to it alone; the records before it were done at the first call."""
    processor = Reporting(
        lambda records, call: (
            BatchResult(failed=[r for r in records if r.sequence_number == "3"])
            if any(r.sequence_number == "3" for r in records)
            else None
        )
    )
    drive = run(processor, 1, 2, 3, 4, 5, then="skip")
    assert processor.calls[0] == ["1", "2", "3", "4", "5"]
    assert all(call[0] != "1" for call in processor.calls[1:]), "1-2 never again"
    assert [[r.sequence_number for r in s.batch.records] for s in drive.skipped] == [["3"]]
    assert drive.skipped[0].attempts == 1, "alone, once: it failed four times before"
    assert drive.stored()[0] == "2"
    assert drive.stored()[-1] == "5"


def test_dead_letters_take_only_the_records_that_fail() -> None:
    processor = Reporting(
        lambda records, call: BatchResult(
            failed=[r for r in records if r.sequence_number in ("2", "4")]
        )
    )
    drive = run(processor, 1, 2, 3, 4, 5, then="deadLetter")
    written = [[r.sequence_number for r in d.batch.records] for d in drive.dead_letters]
    assert written == [["2"], ["4"]]
    assert drive.stored()[-1] == "5"


def test_progress_starts_the_retry_count_over() -> None:
    """Each call gets one more record done: never blocked, never passed over."""
    processor = Reporting(
        lambda records, call: BatchResult(failed=records[1:]) if len(records) > 1 else None
    )
    drive = run(processor, *range(1, 11), then="skip")
    assert [call[0] for call in processor.calls] == [str(i) for i in range(1, 11)]
    assert drive.skipped == []
    assert drive.stored() == [str(i) for i in range(1, 11)]


def test_a_plain_function_returns_its_failed_records_too() -> None:
    def handle(records: list[Record]) -> ProcessResult:
        if len(records) != 3:
            return None
        return BatchResult(failed=[r for r in records if r.sequence_number == "2"])

    drive = Drive(FunctionProcessor(handle))
    drive.machine.read(batch(1, 2, 3))
    drive.run(until=60)
    assert drive.stored() == ["1", "3"]


def test_a_hand_off_while_retrying_releases_at_the_last_record_done() -> None:
    processor = Reporting(
        lambda records, call: BatchResult(failed=[r for r in records if r.sequence_number == "3"])
    )
    drive = run(processor, 1, 2, 3, 4)
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=200)
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "2"


def test_the_harness_reads_a_batch_result_as_the_worker_does() -> None:
    harness = ProcessorHarness(Reporting(once("2")))
    records = batch(1, 2, 3).records
    assert [r.sequence_number for r in harness.process(records)] == ["2", "3"]
    assert harness.checkpoints == ["1"]
    assert harness.process(records[1:]) == []
    assert harness.checkpoints == ["1", "3"]
    with pytest.raises(BatchResultError):
        ProcessorHarness(Reporting(lambda records, call: BatchResult(failed=["9"]))).process(
            records
        )


class ReportsOnce(BaseRecordProcessor):
    """The threaded runtime's processor: reports each batch's second record failed the
    first time it sees it; records what it finished."""

    done: ClassVar[list[str]] = []
    reported: ClassVar[set[str]] = set()

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        if len(records) > 1 and records[1].sequence_number not in ReportsOnce.reported:
            ReportsOnce.reported.add(records[1].sequence_number)
            ReportsOnce.done.append(records[0].sequence_number)
            checkpointer.checkpoint(records[0])
            return BatchResult(failed=[records[1]])
        ReportsOnce.done.extend(r.sequence_number for r in records)
        checkpointer.checkpoint()
        return None


def test_the_threaded_runtime_redelivers_only_what_was_reported_failed() -> None:
    ReportsOnce.done, ReportsOnce.reported = [], set()
    operator = run_threaded(ReportsOnce, lambda _: len(ReportsOnce.done) >= 5)
    assert ReportsOnce.done == ["1", "2", "3", "4", "5"], "in order, each once"
    assert ReportsOnce.reported == {"2", "5"}
    assert operator.coordinator.leases["child"].checkpoint == "5"


@pytest.mark.parametrize("result", [["2"], ("2",), "2", True, 3, {"2": "x"}, [None]])
def test_only_a_batch_result_reports_failures(result: object) -> None:
    """What processors returned before partial responses (a count, their transformed
    records) still means all done: only a BatchResult is read."""
    processor = Reporting(lambda records, call: result)
    drive = run(processor, 1, 2, 3)
    assert processor.calls == [["1", "2", "3"]]
    assert drive.stored()[-1] == "3"
    assert first_failed(batch(1, 2, 3).records, result) == 3
