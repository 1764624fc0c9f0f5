"""reading.maxBatchingWindowSeconds in the shard's machine, through the worker's driver on
a fake clock: a call gathers reads for at most the window after its first record, is
made at once when full, at the shard's end or before something it cannot merge, and a
retry or a hand-off never gathers more."""

from __future__ import annotations

from datetime import UTC, datetime

from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.batching import BatchingWindow
from streamconsumer.worker.shard import FilteredOut, Stop

from .shard_drive import Drive, batch


class Calls(BaseRecordProcessor):
    """Each call's sequence numbers and when it was made; raises `failures` times first."""

    def __init__(self, drive_clock: list[Drive], failures: int = 0) -> None:
        self.drive = drive_clock
        self.calls: list[tuple[float, list[int]]] = []
        self.failures = failures

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.calls.append(
            (round(self.drive[0].clock, 2), [int(r.sequence_number) for r in records])
        )
        if self.failures:
            self.failures -= 1
            raise RuntimeError("sink down")
        checkpointer.checkpoint()


def at(wall: float) -> datetime:
    return datetime.fromtimestamp(wall, UTC)


def gathering(seconds: float = 2.0, fill_to: int = 1000, **options: object) -> tuple[Drive, Calls]:
    holder: list[Drive] = []
    calls = Calls(holder, failures=int(options.pop("failures", 0)))  # type: ignore[call-overload]
    drive = Drive(calls, window=BatchingWindow(seconds, fill_to), **options)  # type: ignore[arg-type]
    holder.append(drive)
    drive.run(until=0.0)  # initialize
    return drive, calls


def test_reads_within_the_window_are_one_call_when_it_closes() -> None:
    drive, calls = gathering(seconds=2.0)
    drive.machine.read(batch(1, 2))
    drive.run(until=0.5)
    assert calls.calls == [], "the call waits for more"
    drive.machine.read(batch(3))
    drive.machine.read(batch())  # an empty read merges in as nothing
    drive.run(until=1.9)
    assert calls.calls == []
    drive.run(until=5.0)
    ((at, sequences),) = calls.calls
    assert sequences == [1, 2, 3]
    assert 2.0 <= at <= 2.05, "the window counts from the first record seen, not the last"
    assert drive.stored() == ["3"]


def test_a_full_call_is_made_at_once() -> None:
    drive, calls = gathering(seconds=60.0, fill_to=4)
    drive.machine.read(batch(1, 2))
    drive.run(until=0.1)
    drive.machine.read(batch(3, 4))
    drive.run(until=0.2)
    assert [s for _, s in calls.calls] == [[1, 2, 3, 4]]
    assert calls.calls[0][0] <= 0.2


def test_a_read_that_does_not_fit_sends_the_head_at_once_and_waits_on_itself() -> None:
    drive, calls = gathering(seconds=60.0, fill_to=4)
    drive.machine.read(batch(1, 2, 3))
    drive.machine.read(batch(4, 5))
    drive.run(until=0.1)
    assert [s for _, s in calls.calls] == [[1, 2, 3]]
    drive.run(until=59.0)
    assert len(calls.calls) == 1, "the read behind is a call of its own, gathering anew"
    drive.run(until=70.0)
    assert [s for _, s in calls.calls] == [[1, 2, 3], [4, 5]]


def test_the_shards_end_is_not_waited_for() -> None:
    drive, calls = gathering(seconds=60.0)
    drive.machine.read(batch(1))
    drive.run(until=0.1)
    drive.machine.read(batch(2, end=True))
    drive.run(until=0.3)
    assert [s for _, s in calls.calls] == [[1, 2]]
    assert drive.stored()[-1] == "SHARD_END"


def test_records_the_filter_dropped_behind_the_head_end_its_gathering() -> None:
    drive, calls = gathering(seconds=60.0)
    drive.machine.read(batch(1))
    drive.run(until=0.1)
    dropped = batch(2)
    drive.machine.read(FilteredOut(dropped.records, 0))
    drive.run(until=0.3)
    assert [s for _, s in calls.calls] == [[1]]
    assert drive.stored()[-1] == "2", "passed over after the call, as without a window"


def test_a_retry_is_the_same_call_whatever_was_read_since() -> None:
    policy = FailurePolicy(retries=3, then=AfterRetries.BLOCK)
    drive, calls = gathering(seconds=1.0, failures=1, policy=policy)
    drive.machine.read(batch(1))
    drive.run(until=1.05)  # the first attempt, at the window's end, raises
    drive.machine.read(batch(2))
    drive.run(until=30.0)
    assert [s for _, s in calls.calls] == [[1], [1], [2]]


def test_a_hand_off_while_gathering_releases_before_what_was_not_delivered() -> None:
    drive, calls = gathering(seconds=60.0)
    drive.machine.read(batch(1, 2))
    drive.run(until=1.0)
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=2.0)
    assert calls.calls == []
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number is None, "at the last record done: none"


def test_without_a_window_each_read_is_a_call_at_once() -> None:
    drive, calls = gathering(seconds=0.0)
    drive.machine.read(batch(1))
    drive.machine.read(batch(2))
    drive.run(until=0.1)
    assert [s for _, s in calls.calls] == [[1], [2]]


class ReadsDuringItsCall(Calls):
    """Record 1's call takes 5 s; record 2 is read one second into it."""

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        drive = self.drive[0]
        if records[0].sequence_number == "1":
            drive.clock += 1.0
            drive.machine.read(batch(2), now=drive.clock)
            drive.clock += 4.0
        super().process_records(records, checkpointer)


def test_a_record_read_during_a_call_counts_its_window_from_its_read() -> None:
    holder: list[Drive] = []
    calls = ReadsDuringItsCall(holder)
    drive = Drive(calls, window=BatchingWindow(2.0, 1000))
    holder.append(drive)
    drive.run(until=0.0)
    drive.machine.read(batch(1), now=0.0)
    drive.run(until=30.0)
    (_, first), (at, second) = calls.calls
    assert (first, second) == ([1], [2])
    assert at < 7.1, "read at 3, its window passed at 5: called once record 1's call ended at 7"


def test_the_rest_of_a_call_split_by_age_is_retried_alone() -> None:
    policy = FailurePolicy(retries=10, then=AfterRetries.SKIP, max_record_age_seconds=10)
    drive, calls = gathering(seconds=5.0, failures=1, policy=policy)
    drive.epoch = 1000.0  # the wall clock at time 0: record 1 arrived 100 s before
    old, young = (
        Record(b"d", "k", str(n), approximate_arrival_timestamp=arrived, checkpoint_sequence=str(n))
        for n, arrived in ((1, at(900.0)), (2, at(1000.0)))
    )
    drive.machine.read(ReadResult([old, young], 0), now=0.0)
    drive.run(until=5.05)  # [1, 2] raises; 1 is too old: skipped, 2 stays
    drive.machine.read(batch(3), now=drive.clock)
    drive.run(until=30.0)
    assert [s for _, s in calls.calls][:2] == [[1, 2], [2]], "the retry is the call's rest"
    assert calls.calls[1][0] < 6.0, "not held for a new window"
