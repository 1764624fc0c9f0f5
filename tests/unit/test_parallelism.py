"""processor.parallelism (issue 29): a batch split by key into calls that run at once,
each key's records in order in one call, the checkpoint at the low watermark, and the
records done past a failed one never delivered again."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.controller.workloads.children import deployment
from streamconsumer.deadletter import DeadLetters
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.processor import (
    BaseRecordProcessor,
    BatchResult,
    Checkpointer,
    ProcessResult,
    Record,
)
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker.calls import PartlyFailed, call_processor, threaded
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.lanes import split, watermark
from streamconsumer.worker.shard import Deliver, Stop
from testbed.specs import consumer_spec, worker_config

from .letter_targets import StubTarget
from .shard_drive import Drive


def keyed(*pairs: tuple[int, str]) -> ReadResult:
    records = [Record(b"d", key, str(s), checkpoint_sequence=str(s)) for s, key in pairs]
    return ReadResult(records, millis_behind_latest=0)


def records_of(keys: list[int]) -> list[Record]:
    return [
        Record(b"d", f"k{key}", str(i + 1), checkpoint_sequence=str(i + 1))
        for i, key in enumerate(keys)
    ]


# --- the split and the watermark ------------------------------------------------------------


@given(st.lists(st.integers(0, 30), max_size=200), st.integers(1, 12))
def test_a_split_keeps_each_key_whole_and_in_order_and_balances_the_groups(
    keys: list[int], parallelism: int
) -> None:
    records = records_of(keys)
    groups = split(records, parallelism)
    assert sorted(i for group in groups for i in group) == list(range(len(records)))
    assert len(groups) == min(parallelism, len(set(keys)))
    group_of: dict[str, int] = {}
    for number, group in enumerate(groups):
        assert group == sorted(group), "a group's records in batch order"
        for i in group:
            assert group_of.setdefault(records[i].partition_key, number) == number
    if groups:
        loads = [len(group) for group in groups]
        largest = max(Counter(keys).values())
        assert max(loads) - min(loads) <= largest, "greedy onto the lightest group"


def test_a_split_spreads_uneven_keys_evenly() -> None:
    """A fixed hash of key to lane would leave lanes uneven; 12 keys of 1..12 records
    onto 3 groups: 78 records, 26 each."""
    keys = [key for key in range(1, 13) for _ in range(key)]
    loads = sorted(len(group) for group in split(records_of(keys), 3))
    assert loads == [26, 26, 26]


@given(st.integers(0, 50), st.sets(st.integers(0, 60)))
def test_the_watermark_is_the_longest_prefix_all_done(count: int, done: set[int]) -> None:
    low = watermark(count, done)
    assert all(i in done for i in range(low))
    assert low == count or low not in done


# --- through the ShardMachine -----------------------------------------------------------------


class Keyed(BaseRecordProcessor):
    """Fails the records named in `failing` (sequence -> times left), per call as a
    partial batch response from the first failing record of the call; records every
    delivery and every record done; checkpoints its own last done record."""

    def __init__(self, failing: dict[str, int] | None = None, raising: bool = False) -> None:
        self.failing = failing or {}
        self.raising = raising
        self.delivered: list[str] = []
        self.done: list[str] = []
        self.lock = threading.Lock()

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        with self.lock:
            self.delivered += [r.sequence_number for r in records]
        for index, record in enumerate(records):
            if self.failing.get(record.sequence_number, 0) > 0:
                self.failing[record.sequence_number] -= 1
                if index:
                    checkpointer.checkpoint(records[index - 1])
                if self.raising:
                    raise RuntimeError(f"{record.sequence_number} failed")
                return BatchResult(failed=[record])
            with self.lock:
                self.done.append(record.sequence_number)
        checkpointer.checkpoint()
        return None


def test_records_done_past_a_failed_one_are_never_delivered_again() -> None:
    processor = Keyed(failing={"2": 1})
    drive = Drive(processor, parallelism=2)
    drive.machine.read(keyed((1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "b")))
    drive.run(until=60)
    # Key a's call reported 2 failed, and 4 with it (after it); key b's call did 3 and 5.
    assert sorted(processor.delivered, key=int) == ["1", "2", "2", "3", "4", "4", "5"]
    assert Counter(processor.done) == Counter({"1": 1, "2": 1, "3": 1, "4": 1, "5": 1})
    assert drive.stored() == ["1", "5"], "the watermark: 1 while 2 failed, then all"


@pytest.mark.parametrize("raising", [False, True])
def test_the_checkpoint_never_passes_a_record_not_done(raising: bool) -> None:
    processor = Keyed(failing={"3": 2}, raising=raising)
    drive = Drive(processor, parallelism=3)
    drive.machine.read(keyed((1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")))
    for until in range(1, 60):
        drive.run(until=until / 4)
        stored = [int(s) for s in drive.stored() if s is not None]
        assert not stored or max(stored) < 3 or processor.done.count("3")
    drive.run(until=60)
    assert drive.stored()[-1] == "6"
    assert sorted(processor.done, key=int) == ["1", "2", "3", "4", "5", "6"]
    assert processor.delivered.count("4") == processor.delivered.count("5") == 1


def test_a_key_after_its_failed_record_waits_for_it() -> None:
    """A key's records after one that failed are not done before it: its group stops at
    the failure (a partial batch response names the rest failed too)."""
    processor = Keyed(failing={"1": 1})
    drive = Drive(processor, parallelism=2)
    drive.machine.read(keyed((1, "a"), (2, "a"), (3, "b")))
    drive.run(until=60)
    assert processor.done == ["3", "1", "2"]


def test_the_policy_passes_over_only_what_is_not_done() -> None:
    processor = Keyed(failing={"2": 99})
    policy = FailurePolicy.model_validate({"retries": 1, "then": "skip"})
    drive = Drive(processor, parallelism=2, policy=policy)
    drive.machine.read(keyed((1, "a"), (2, "a"), (3, "b"), (4, "b")))
    drive.run(until=600)
    assert [r.sequence_number for s in drive.skipped for r in s.batch.records] == ["2"]
    assert drive.stored()[-1] == "4"
    assert processor.delivered.count("3") == 1


def test_a_checkpoint_at_another_groups_record_fails_the_group() -> None:
    class Reaching(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            checkpointer.checkpoint("2")

    drive = Drive(Reaching(), parallelism=2)
    drive.machine.read(keyed((1, "a"), (2, "b")))
    step = drive.machine.next(0.0)
    drive.machine.returned(0.0)  # initialize
    step = drive.machine.next(0.0)
    assert isinstance(step, Deliver)
    with pytest.raises(PartlyFailed, match=r"CheckpointError: .* not in this call's records"):
        call_processor(step, drive.machine, Reaching(), Reaching)


def test_kpl_sub_records_of_one_aggregate_keep_the_checkpoint_before_it() -> None:
    """An aggregate's user records have keys of their own: while one of them is not done,
    the checkpoint stays at the last whole aggregate before it."""
    sub = [
        Record(b"d", key, "20", sub_sequence_number=i, checkpoint_sequence="20" if i == 2 else "10")
        for i, key in enumerate("abc")
    ]
    first = Record(b"d", "a", "10", checkpoint_sequence="10")
    processor = Keyed(failing={"20": 1})  # every sub-record of 20 fails its first call
    drive = Drive(processor, parallelism=3)
    drive.machine.read(ReadResult([first, *sub], millis_behind_latest=0))
    drive.run(until=0.05)
    assert drive.stored() == ["10"]
    drive.run(until=60)
    assert drive.stored() == ["10", "20"]


# --- at once, on threads --------------------------------------------------------------------


def test_groups_run_at_once_and_a_key_never_runs_twice_at_once() -> None:
    running: Counter[str] = Counter()
    calls = most = 0
    lock = threading.Lock()
    # Each call waits for the other three: run one after another, the first would wait
    # in vain and raise (no timed assertion; the timeout only bounds a failure).
    all_four = threading.Barrier(4, timeout=30)

    class Meeting(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            nonlocal calls, most
            keys = {r.partition_key for r in records}
            with lock:
                assert not any(running[k] for k in keys), "a key in two calls at once"
                running.update(keys)
                calls += 1
                most = max(most, calls)
            all_four.wait()
            with lock:
                running.subtract(keys)
                calls -= 1

    with ThreadPoolExecutor(3) as pool:
        drive = Drive(Meeting(), parallelism=4, fanout=threaded(pool))
        drive.machine.read(keyed(*[(i, f"k{i % 6}") for i in range(1, 25)]))
        drive.run(until=1)
    assert most == 4
    assert drive.stored() == ["24"]


def test_a_batching_processor_runs_one_call_at_a_time() -> None:
    assert WorkerCore("w", 3, wants_empty_batches=True, parallelism=8).parallelism == 1
    assert WorkerCore("w", 3, parallelism=8).parallelism == 8


def test_the_setting_reaches_the_workers_only_when_set() -> None:
    """A worker of 0.1 knows no parallelism: the pod template stays as it was at 1, so an
    operator upgrade rolls no worker."""
    name = WorkerConfig.env_name("parallelism")
    spec = consumer_spec()
    assert name not in env_of(deployment("n", "c", spec, "http://o:8080", AUDIENCE))
    spec.processor.parallelism = 10
    env = env_of(deployment("n", "c", spec, "http://o:8080", AUDIENCE))
    assert env[name] == "10"
    read = WorkerConfig.model_validate({**worker_config().model_dump(), "parallelism": env[name]})
    assert read.parallelism == 10


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


# --- processor.batchSize ----------------------------------------------------------------------


class Calls(BaseRecordProcessor):
    """Records each call's sequence numbers; raises once in the call holding `fails`."""

    def __init__(self, fails: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fails = fails

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        sequences = [r.sequence_number for r in records]
        self.calls.append(sequences)
        if self.fails in sequences:
            self.fails = ""
            raise RuntimeError("once")


def test_a_batch_size_cuts_a_read_into_calls_one_after_another() -> None:
    processor = Calls()
    drive = Drive(processor, batch_size=2)
    drive.machine.read(keyed(*[(s, "a") for s in range(1, 6)]))
    drive.run(until=10)
    assert processor.calls == [["1", "2"], ["3", "4"], ["5"]]
    assert drive.stored() == ["5"]


def test_a_later_call_that_raises_leaves_the_earlier_calls_done() -> None:
    processor = Calls(fails="3")
    drive = Drive(processor, batch_size=2)
    drive.machine.read(keyed(*[(s, "a") for s in range(1, 6)]))
    drive.run(until=10)
    assert processor.calls == [["1", "2"], ["3", "4"], ["3", "4"], ["5"]]
    assert drive.stored() == ["2", "5"]


def test_with_parallelism_each_call_is_at_most_the_batch_size_and_keys_stay_in_order() -> None:
    processor = Calls()
    drive = Drive(processor, parallelism=2, batch_size=2)
    drive.machine.read(keyed(*[(s, "ab"[s % 2]) for s in range(1, 11)]))
    drive.run(until=10)
    assert all(len(call) <= 2 for call in processor.calls)
    for key in "ab":
        mine = [s for call in processor.calls for s in call if "ab"[int(s) % 2] == key]
        assert mine == sorted(mine, key=int)
    assert drive.stored() == ["10"]


class HandsOffOnRetry(BaseRecordProcessor):
    """Record 1 fails once (a partial batch response) while its neighbour of another key
    is done; its retry succeeds, and a hand-off arrives while that retry runs."""

    def __init__(self) -> None:
        self.drive: Drive | None = None
        self.failed_once = False
        self.done: list[str] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> Any:
        for record in records:
            if record.sequence_number == "1" and not self.failed_once:
                self.failed_once = True
                return BatchResult(failed=[record])
            if record.sequence_number == "1":
                assert self.drive is not None
                self.drive.machine.revoke(Stop.HANDOFF)
            self.done.append(record.sequence_number)
        return None


def test_a_hand_off_after_a_bisection_releases_past_the_records_done_ahead() -> None:
    """Found by the adversarial review: the bisection left a piece holding only record 2,
    done ahead; the retry of record 1 succeeded while a hand-off came, and the release
    said 1, so the next owner processed 2 again although nothing before it was undone."""
    processor = HandsOffOnRetry()
    policy = FailurePolicy.model_validate({"retries": 0, "then": "skip"})
    drive = Drive(processor, parallelism=2, policy=policy)
    processor.drive = drive
    drive.machine.read(keyed((1, "a"), (2, "b")))
    drive.run(until=60)
    assert sorted(processor.done) == ["1", "2"]
    release = drive.sent[-1]
    assert release.release
    assert release.sequence_number == "2"


# --- a dead letter too large to write ---------------------------------------------------------

NOW = 1_800_000_000.0  # the wall clock when the drive starts
SQS_LIMIT = 256 * 1024


def old(sequence: int, key: str, size: int = 1) -> Record:
    """A record that arrived two minutes before NOW: past a maxRecordAgeSeconds of 60."""
    arrived = datetime.fromtimestamp(NOW - 120, UTC)
    return Record(
        b"x" * size,
        key,
        str(sequence),
        approximate_arrival_timestamp=arrived,
        checkpoint_sequence=str(sequence),
    )


def test_a_block_on_a_record_done_ahead_moves_to_the_earlier_record_still_failing() -> None:
    """Records 1 (key a) and 2 (key b, 200 KiB: over an SQS message as a dead letter) are
    too old to retry and both fail: their dead letter cannot be written, so the shard
    blocks naming 2. The processor's retry does 2 (its other group) while 1 still fails:
    the block named a record already done and kept the shard blocked on it, never trying
    the failure policy on 1. Record 1 is dead-lettered now, and the shard moves on."""
    processor = Keyed(failing={"1": 10**6, "2": 1})
    queue = StubTarget("SQS message", SQS_LIMIT)
    policy = FailurePolicy.model_validate(
        {
            "then": "deadLetter",
            "deadLetter": {"sqs": {"queueURL": "http://q"}},
            "maxRecordAgeSeconds": 60,
        }
    )
    drive = Drive(processor, parallelism=2, policy=policy, dead_letter_writer=DeadLetters(queue))
    drive.epoch = NOW
    drive.machine.read(ReadResult([old(1, "a"), old(2, "b", 200 * 1024)], millis_behind_latest=0))
    for tick in range(1, 100):  # until the dead letter of 1 and 2 is refused
        drive.run(until=tick / 100)
        failing = drive.machine.held(drive.clock).failing
        if failing is not None and failing.blocked:
            break
    assert failing is not None
    assert failing.blocked
    assert "record 2 " in failing.error, "blocked on the letter too large"
    assert processor.done == []
    assert queue.requests == 0

    drive.run(until=120)
    assert processor.done == ["2"], "2 done in the retry, 1 still failing"
    failing = drive.machine.held(drive.clock).failing
    assert failing is None or "record 2 " not in failing.error, "blocked on a record done"
    assert [letter.record.sequence_number for letter in queue.sent] == ["1"]
    assert [[r.sequence_number for r in d.batch.records] for d in drive.dead_letters] == [["1"]]
    assert drive.stored()[-1] == "2", "nothing is left undone"
    assert drive.machine.held(drive.clock).failing is None
