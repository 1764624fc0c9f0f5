"""A Deliver made of several process_records calls (processor.batchSize, parallelism):
each call is timed on its own, and none begins once the shard is lost, fenced, or (with
one group) handed off: the Deliver ends early, not failed (issue 29)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.worker.shard import Deliver, Shutdown, Stop

from .shard_drive import Drive, batch


class Calls(BaseRecordProcessor):
    """Notes each call's records; `during(call_number, drive)` acts inside a call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.during: Callable[[int, Drive], None] = lambda number, drive: None
        self.drive: Drive | None = None

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.calls.append([r.sequence_number for r in records])
        assert self.drive is not None
        self.during(len(self.calls), self.drive)


def driven(parallelism: int = 1, **options: object) -> tuple[Calls, Drive]:
    processor = Calls()
    drive = Drive(processor, parallelism=parallelism, batch_size=2, **options)  # type: ignore[arg-type]
    processor.drive = drive
    return processor, drive


def test_the_timeout_is_each_calls_not_the_whole_reads() -> None:
    """Three calls of 8 s under a 10 s timeout: none is hung, though the read takes 24 s."""
    processor, drive = driven(policy=FailurePolicy(timeout_seconds=10))
    hung: list[bool] = []

    def slow(number: int, drive: Drive) -> None:
        drive.clock += 8
        hung.append(drive.machine.hung(drive.clock))

    processor.during = slow
    drive.machine.read(batch(1, 2, 3, 4, 5, 6))
    drive.run(until=1)
    drive.run(until=drive.clock + 1)
    assert processor.calls == [["1", "2"], ["3", "4"], ["5", "6"]]
    assert hung == [False, False, False]
    assert drive.stored() == ["6"]


def test_a_call_past_the_timeout_is_hung_though_the_read_began_just_before() -> None:
    processor, drive = driven(policy=FailurePolicy(timeout_seconds=10))
    hung: list[bool] = []

    ran_for: list[float] = []

    def last_hangs(number: int, drive: Drive) -> None:
        drive.clock += 1 if number < 3 else 11
        started = drive.machine.call_started
        assert started is not None
        ran_for.append(round(drive.clock - started, 6))
        hung.append(drive.machine.hung(drive.clock))

    processor.during = last_hangs
    drive.machine.read(batch(1, 2, 3, 4, 5, 6))
    drive.run(until=1)
    assert ran_for == [1, 1, 11], "each call timed from its own start"
    assert hung == [False, False, True]


def test_a_hand_off_between_calls_in_turn_releases_at_the_last_call_done() -> None:
    processor, drive = driven()
    processor.during = lambda number, drive: (
        drive.machine.revoke(Stop.HANDOFF) if number == 2 else None
    )
    drive.machine.read(batch(1, 2, 3, 4, 5, 6))
    drive.run(until=5)
    assert processor.calls == [["1", "2"], ["3", "4"]], "the third call is the next owner's"
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "4"
    assert drive.machine.held(drive.clock).failing is None, "a hand-off is no failure"


def test_a_hand_off_waits_for_every_group_under_parallelism() -> None:
    """With groups at once, the ones ahead of the watermark would be replayed by the
    next owner: a planned move lets every call finish instead."""
    processor, drive = driven(parallelism=2)
    processor.during = lambda number, drive: (
        drive.machine.revoke(Stop.HANDOFF) if number == 1 else None
    )
    drive.machine.read(
        type(batch())(
            [Record(b"d", f"k{s % 2}", str(s), checkpoint_sequence=str(s)) for s in range(1, 9)],
            millis_behind_latest=0,
        )
    )
    drive.run(until=5)
    assert sorted(s for call in processor.calls for s in call) == [str(s) for s in range(1, 9)]
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "8"


def test_a_loss_between_calls_makes_no_more_of_them() -> None:
    processor, drive = driven(parallelism=2)
    processor.during = lambda number, drive: (
        drive.machine.revoke(Stop.LOST) if number == 1 else None
    )
    drive.machine.read(batch(1, 2, 3, 4, 5, 6))  # (one key: one group)
    drive.run(until=5)
    assert processor.calls == [["1", "2"]]
    assert not [r for r in drive.sent if r.sequence_number not in (None,)], "nothing stored"


def test_a_fence_between_calls_stops_them_and_the_rest_follows_its_renewal() -> None:
    processor, drive = driven(fence=10.0)
    processor.during = lambda number, drive: setattr(drive, "clock", 10.0) if number == 1 else None
    drive.machine.read(batch(1, 2, 3, 4, 5, 6))
    drive.run(until=10.5)
    assert processor.calls == [["1", "2"]], "no call once fenced"
    assert drive.machine.held(drive.clock).failing is None
    drive.machine.renew(100.0)
    drive.run(until=20)
    assert processor.calls == [["1", "2"], ["3", "4"], ["5", "6"]], "the rest, once"
    assert drive.stored()[-1] == "6"


def test_interrupted_is_the_deliver_not_the_shutdown() -> None:
    """(What follows a cut-short Deliver at a hand-off: shutdown_requested, then the
    release.)"""
    processor, drive = driven()
    steps: list[type] = []
    processor.during = lambda number, drive: (
        drive.machine.revoke(Stop.HANDOFF) if number == 1 else None
    )
    drive.machine.read(batch(1, 2, 3, 4))
    original = drive.begin

    def noting(step: object) -> bool:
        steps.append(type(step))
        return original(step)  # type: ignore[arg-type]

    drive.begin = noting  # type: ignore[method-assign]
    drive.run(until=5)
    assert steps[-2:] == [Deliver, Shutdown]


class Abort(BaseException):
    """Not an Exception: what a processor might raise by mistake (or GeneratorExit)."""


def test_a_base_exception_fails_its_call_and_the_other_groups_are_waited_for() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from streamconsumer.worker.calls import threaded

    calls: list[str] = []

    class Aborts(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            calls.append(records[0].partition_key)
            if records[0].partition_key == "k0" and calls.count("k0") == 1:
                raise Abort()
            threading.Event().wait(0.05)  # the other group is still running when k0 aborts

    with ThreadPoolExecutor(1) as pool:
        drive = Drive(Aborts(), parallelism=2, fanout=threaded(pool))
        drive.machine.read(
            type(batch())(
                [Record(b"d", f"k{s % 2}", str(s), checkpoint_sequence=str(s)) for s in (1, 2)],
                millis_behind_latest=0,
            )
        )
        drive.run(until=5)
    assert sorted(calls) == ["k0", "k0", "k1"], "k0 retried; k1's call not made twice"
    assert drive.stored()[-1] == "2"


# --- found by a helper's review of the above, each failing before its fix ---------------


def test_the_rest_of_an_interrupted_batch_has_not_failed_yet() -> None:
    """[1,2] fails once, then returns as the fence closes before [3]: after the renewal
    [3] is delivered, not skipped with [1,2]'s failure (retryForSeconds 5, then skip)."""
    processor, drive = driven(
        fence=10.0, policy=FailurePolicy(retries=100, retry_for_seconds=5, then="skip")
    )

    def once_then_fence(number: int, drive: Drive) -> None:
        if number == 1:
            raise RuntimeError("transient")
        if number == 2:
            drive.clock = 10.0

    processor.during = once_then_fence
    drive.machine.read(batch(1, 2, 3))
    drive.run(until=10.5)
    assert drive.machine.held(drive.clock).failing is None
    drive.machine.renew(1000.0)
    drive.clock = 20.0
    drive.run(until=30)
    assert processor.calls == [["1", "2"], ["1", "2"], ["3"]]
    assert drive.skipped == []
    assert drive.stored()[-1] == "3"


def test_a_hand_off_never_cuts_a_kpl_aggregate() -> None:
    """A release inside an aggregate is at the record before it (checkpoint_sequence), so
    the next owner would do its parts again: a hand-off stops after a whole record only."""
    aggregate = [
        Record(
            b"d", "k", "100", sub_sequence_number=i, checkpoint_sequence="100" if i == 3 else "50"
        )
        for i in range(4)
    ]
    records = [
        Record(b"d", "k", "50", checkpoint_sequence="50"),
        *aggregate,
        Record(b"d", "k", "200", checkpoint_sequence="200"),
        Record(b"d", "k", "300", checkpoint_sequence="300"),
        Record(b"d", "k", "400", checkpoint_sequence="400"),
    ]
    processor, drive = driven()
    processor.during = lambda number, drive: (
        drive.machine.revoke(Stop.HANDOFF) if number == 1 else None
    )
    drive.machine.read(type(batch())(records, millis_behind_latest=0))
    drive.run(until=5)
    assert processor.calls == [["50", "100"], ["100", "100"], ["100", "200"]], "whole"
    assert drive.sent[-1].release
    assert drive.sent[-1].sequence_number == "200"


def test_a_fence_passed_between_calls_is_no_call_outliving_it() -> None:
    """The watchdog wakes at the fence; if no call runs then (the next one will not
    begin), the worker is not ended for a call past its fence."""
    from streamconsumer.worker.core import WorkerCore

    processor, drive = driven(fence=10.0)
    core = WorkerCore("w", prefetch=10)
    core.machines["s"] = drive.machine
    verdicts: list[str | None] = []

    def between_calls(number: int, drive: Drive) -> None:
        drive.clock = 9.999

    processor.during = between_calls
    original = drive.machine.part_ended

    def ended(group: int, now: float) -> None:
        original(group, now)
        core.watch(10.0)  # the watchdog, at the fence, before the next call is refused
        verdicts.append(core.overran)
        drive.clock = 10.0  # (the thread's own work between calls crosses the fence)

    drive.machine.part_ended = ended  # type: ignore[method-assign]
    drive.machine.read(batch(1, 2, 3, 4))
    drive.run(until=0.5)
    assert processor.calls == [["1", "2"]]
    assert verdicts == [None]


def test_a_base_exception_in_a_later_call_keeps_the_earlier_calls_done() -> None:
    class Exits(BaseRecordProcessor):
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            self.calls.append([r.sequence_number for r in records])
            if len(self.calls) == 2:
                raise SystemExit(3)

    processor = Exits()
    drive = Drive(processor, batch_size=2)
    drive.machine.read(batch(1, 2, 3, 4))
    drive.run(until=5)
    assert processor.calls == [["1", "2"], ["3", "4"], ["3", "4"]]
    assert drive.stored() == ["2", "4"]
