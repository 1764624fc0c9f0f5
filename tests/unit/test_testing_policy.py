"""The harness under a failure policy (issue 27): `ProcessorHarness.deliver` says what the
worker would do with a batch — retries, partial batch responses, bisection, skip,
dead-letter, block, maxRecordAgeSeconds, a hung call — by running the worker's own
ShardMachine, on a clock that jumps over back-offs. Each test pins an outcome: which
calls were made with which records, where each record ended, what was stored."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from streamconsumer.models.failure import AfterRetries, FailurePolicy
from streamconsumer.processor import BaseRecordProcessor, BatchResult, Checkpointer, Record
from streamconsumer.testing import Delivery, ProcessorHarness, make_records

SQS = {"sqs": {"queueURL": "https://sqs.eu-west-1.amazonaws.com/1/dlq"}}


def poisoned(records: list[Record]) -> None:
    """A function processor that raises on any batch holding a record whose data is
    `poison`."""
    if any(r.data == b"poison" for r in records):
        raise ValueError("cannot parse poison")


def sequences(records: list[Record]) -> list[str]:
    return [r.sequence_number for r in records]


def calls(delivery: Delivery) -> list[list[str]]:
    return [sequences(a.records) for a in delivery.attempts]


def test_skip_retries_then_bisects_down_to_the_poison_and_checkpoints_past_it() -> None:
    records = make_records("a", "b", "poison", "d")
    harness = ProcessorHarness(poisoned, policy={"retries": 2, "then": "skip"})
    delivery = harness.deliver(records)
    whole = ["1", "2", "3", "4"]
    # 3 attempts of the batch, then halves tried once each, the failing half split again.
    assert calls(delivery) == [whole, whole, whole, ["1", "2"], ["3", "4"], ["3"], ["4"]]
    assert delivery.attempts[0].error == "ValueError: cannot parse poison"
    returned = [a.error is None for a in delivery.attempts]
    assert returned == [False, False, False, True, False, False, True]
    assert sequences(delivery.done) == ["1", "2", "4"]
    assert sequences(delivery.skipped) == ["3"]
    assert delivery.dead_lettered == delivery.left == []
    assert delivery.letters == []
    assert delivery.blocked is delivery.hung is None
    (skip,) = delivery.given_up
    assert (skip.action, skip.error, skip.attempts) == (
        "skip",
        "ValueError: cannot parse poison",
        1,
    )
    assert delivery.checkpoints == ["2", "3", "4"]
    assert harness.checkpoints == ["2", "3", "4"]


def test_block_retries_then_stops_where_the_worker_blocks_the_shard() -> None:
    records = make_records("a", "poison")
    harness = ProcessorHarness(poisoned, policy=FailurePolicy(retries=3))
    delivery = harness.deliver(records)
    assert calls(delivery) == [["1", "2"]] * 4  # the first attempt and 3 retries, no bisection
    assert delivery.blocked == "ValueError: cannot parse poison"
    assert delivery.left == records  # nothing passed over, nothing checkpointed
    assert delivery.done == delivery.skipped == []
    assert delivery.checkpoints == []


def test_retry_for_seconds_ends_the_retries_before_their_count() -> None:
    """Back-offs move the harness's clock (0.5s doubling, jittered): 1000 retries would
    take hours, retryForSeconds 3 blocks the shard after a few."""
    policy = {"retries": 1000, "retryForSeconds": 3, "initialBackoffSeconds": 0.5}
    delivery = ProcessorHarness(poisoned, policy=policy).deliver(make_records("poison"))
    assert delivery.blocked is not None
    assert 2 < len(delivery.attempts) < 20


def test_dead_letter_writes_the_letters_the_target_would_get() -> None:
    records = make_records("a", "poison", partition_key="user-7")
    policy = {"retries": 0, "then": "deadLetter", "deadLetter": SQS}
    harness = ProcessorHarness(poisoned, policy=policy, consumer="shop/clicks")
    delivery = harness.deliver(records)
    assert calls(delivery) == [["1", "2"], ["1"], ["2"]]
    assert sequences(delivery.dead_lettered) == ["2"]
    (letter,) = delivery.letters
    assert letter["consumer"] == "shop/clicks"
    assert letter["shardId"] == "shardId-000000000000"
    assert letter["sequenceNumber"] == "2"
    assert letter["partitionKey"] == "user-7"
    assert base64.b64decode(letter["data"]) == b"poison"
    assert letter["error"] == "ValueError: cannot parse poison"
    assert letter["attempts"] == 1  # a bisected half is tried once
    assert delivery.checkpoints == ["1", "2"]


def test_a_letter_too_large_for_its_target_blocks_unless_overflow_s3_takes_it() -> None:
    records = make_records("poison" + "x" * 2000)
    failing = ProcessorHarness(
        lambda rs: BatchResult(failed=rs),
        policy={"retries": 0, "then": "deadLetter", "deadLetter": SQS},
        letter_limit=1024,
    )
    blocked = failing.deliver(records)
    assert blocked.blocked is not None
    assert blocked.blocked.startswith("record 1 is ")
    assert "over the dead-letter target limit of 1024 bytes" in blocked.blocked
    assert blocked.letters == []
    assert blocked.dead_lettered == []
    assert blocked.left == records
    overflowing = ProcessorHarness(
        lambda rs: BatchResult(failed=rs),
        policy={
            "retries": 0,
            "then": "deadLetter",
            "deadLetter": SQS | {"overflowS3": {"bucket": "dlq-large"}},
        },
        letter_limit=1024,
    )
    written = overflowing.deliver(records)
    assert written.blocked is None
    assert [letter["sequenceNumber"] for letter in written.letters] == ["1"]
    assert written.dead_lettered == records


def test_a_partial_batch_response_retries_only_the_records_from_the_first_failed() -> None:
    def load(records: list[Record]) -> BatchResult:
        return BatchResult(failed=[r for r in records if r.data == b"poison"])

    records = make_records("a", "b", "poison", "d")
    delivery = ProcessorHarness(load, policy={"retries": 1, "then": "skip"}).deliver(records)
    # 1 and 2 are done at once and never delivered again; 3 and 4 are the failing batch,
    # failed once already: one retry, then bisected.
    assert calls(delivery) == [["1", "2", "3", "4"], ["3", "4"], ["3"], ["4"]]
    assert delivery.attempts[0].error == ("process_records reported 2 of 4 records failed, from 3")
    assert sequences(delivery.done) == ["1", "2", "4"]
    assert sequences(delivery.skipped) == ["3"]
    assert delivery.checkpoints == ["2", "3", "4"]


def test_a_checkpoint_past_a_record_reported_failed_fails_the_whole_call() -> None:
    class Greedy(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> BatchResult:
            checkpointer.checkpoint()
            return BatchResult(failed=[r for r in records if r.data == b"poison"])

    delivery = ProcessorHarness(Greedy(), policy={"retries": 0}).deliver(
        make_records("a", "poison")
    )
    assert delivery.done == []  # what it reported done does not count
    assert delivery.checkpoints == []
    assert delivery.blocked is not None
    assert "asked for in a call that reported records after" in delivery.blocked


def test_records_past_max_record_age_are_passed_over_at_their_first_failure() -> None:
    old = make_records("a", "b", arrived=datetime.now(UTC) - timedelta(hours=2))
    young = make_records("c", first_sequence=3)
    policy = {"retries": 2, "maxRecordAgeSeconds": 3600, "then": "skip"}
    delivery = ProcessorHarness(poisoned_all, policy=policy).deliver(old + young)
    # One attempt of the whole batch; the old records go at once, without bisection;
    # the young one is then a failing batch of its own (its count starts over): tried
    # three times, then skipped.
    assert calls(delivery) == [["1", "2", "3"], ["3"], ["3"], ["3"]]
    old_ones, young_one = delivery.given_up
    assert (old_ones.action, sequences(old_ones.records)) == ("skip", ["1", "2"])
    assert old_ones.error == (
        "ValueError: everything fails (older than maxRecordAgeSeconds 3600: not retried)"
    )
    assert (young_one.error, young_one.attempts) == ("ValueError: everything fails", 3)
    assert sequences(delivery.skipped) == ["1", "2", "3"]
    assert delivery.checkpoints == ["2", "3"]


def poisoned_all(records: list[Record]) -> None:
    raise ValueError("everything fails")


def test_a_processor_that_never_checkpointed_keeps_the_checkpoint_back() -> None:
    """A batching sink's unflushed records: passing the poison over does not checkpoint
    past records the processor has not checkpointed itself."""

    class Batching(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            poisoned(records)  # and keeps the rest for a later flush

    harness = ProcessorHarness(Batching(), policy={"retries": 0, "then": "skip"})
    delivery = harness.deliver(make_records("a", "poison"))
    assert sequences(delivery.done) == ["1"]
    assert sequences(delivery.skipped) == ["2"]
    assert delivery.checkpoints == []


def test_deliveries_go_on_from_where_the_last_one_left_the_shard() -> None:
    """One machine per harness, as one per shard in the worker: initialize() once, and
    the checkpoint position carries from batch to batch."""
    seen: list[str] = []

    class Counting(BaseRecordProcessor):
        initialized = 0

        def initialize(self, shard: object) -> None:
            self.initialized += 1

        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            seen.extend(sequences(records))
            checkpointer.checkpoint()

    processor = Counting()
    harness = ProcessorHarness(processor, policy={"then": "skip"})
    assert harness.deliver(make_records("a", "b")).checkpoints == ["2"]
    assert harness.deliver(make_records("c", first_sequence=3)).checkpoints == ["3"]
    assert processor.initialized == 1
    assert seen == ["1", "2", "3"]
    assert harness.checkpoints == ["2", "3"]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets a hung call's thread end after the test (the worker's ends with its process)."""
    event = threading.Event()
    yield event
    event.set()


def test_a_call_past_timeout_seconds_is_reported_hung_not_waited_for(
    release: threading.Event,
) -> None:
    def stuck(records: list[Record]) -> None:
        if any(r.data == b"stuck" for r in records):
            release.wait()

    harness = ProcessorHarness(stuck, policy={"timeoutSeconds": 1})
    assert harness.deliver(make_records("a")).checkpoints == ["1"]  # returns in time: done
    records = make_records("b", "stuck", first_sequence=2)
    started = time.monotonic()
    delivery = harness.deliver(records)
    assert time.monotonic() - started < 10
    assert delivery.hung == (
        "process_records has not returned after 1s (timeoutSeconds 1): the worker restarts"
    )
    assert calls(delivery) == [["2", "3"]]
    assert delivery.left == records  # processed again from the last checkpoint, "1"
    assert delivery.done == []
    assert delivery.checkpoints == []
    assert harness.checkpoints == ["1"]
    with pytest.raises(RuntimeError, match="a new harness starts at the last checkpoint"):
        harness.deliver(records)


def test_the_policy_is_the_resource_s_own_model() -> None:
    with pytest.raises(ValidationError, match="retrys"):
        ProcessorHarness(poisoned, policy={"retrys": 2}).deliver(make_records("a"))
    with pytest.raises(ValueError, match="then: deadLetter goes with deadLetter"):
        ProcessorHarness(poisoned, policy={"then": "deadLetter"}).deliver(make_records("a"))
    policy = FailurePolicy(retries=0, then=AfterRetries.SKIP)
    delivery = ProcessorHarness(poisoned, policy=policy).deliver(make_records("poison"))
    assert sequences(delivery.skipped) == ["1"]


def test_without_the_worker_extra_deliver_names_it(tmp_path: Path) -> None:
    """The SDK alone has no pydantic: the harness imports, process() works, deliver()
    says which extra it needs (tests/integration/test_dist.py runs it without pydantic)."""
    script = (
        "import sys\n"
        "sys.modules['pydantic'] = None  # as if not installed\n"
        "from streamconsumer.testing import NeedsWorkerExtra, ProcessorHarness, make_records\n"
        "harness = ProcessorHarness(lambda records: None, policy={'then': 'skip'})\n"
        "harness.process(make_records('a'))\n"
        "try:\n"
        "    harness.deliver(make_records('b', first_sequence=2))\n"
        "except NeedsWorkerExtra as error:\n"
        "    print(error)\n"
    )
    operator = Path(__file__).resolve().parents[2] / "operator"
    ran = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": str(operator)},
    )
    assert ran.stdout.strip() == (
        "ProcessorHarness.deliver runs the worker's failure policy, which needs pydantic: "
        "pip install 'streamconsumer[worker]'"
    )


def test_every_readme_block_runs_to_its_end_with_the_worker_extra() -> None:
    """The README's blocks as tests/integration/test_dist.py runs them in the SDK alone,
    here with pydantic: the harness block that only names the extra there runs whole."""
    from integration.test_dist import README_BLOCKS, ROOT

    ran = subprocess.run(
        [sys.executable, "-c", README_BLOCKS, str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT / "operator")},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("blocks ran, with the worker extra"), ran.stdout


def test_a_failure_no_policy_can_pass_over_is_reported_blocked_not_retried_for_ever() -> None:
    """An empty batch (a processor that asks for them) that keeps failing: nothing to
    skip, so the worker retries it for ever, and the harness stops and says so."""

    class FailsEmpty(BaseRecordProcessor):
        wants_empty_batches = True

        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            raise OSError("sink down")

    delivery = ProcessorHarness(FailsEmpty(), policy={"retries": 2, "then": "skip"}).deliver([])
    assert calls(delivery) == [[]] * 4  # one past the retries: the policy did not act
    assert delivery.blocked == "OSError: sink down"
    assert delivery.skipped == []


def test_process_after_deliver_is_refused() -> None:
    harness = ProcessorHarness(lambda records: None, policy={"then": "skip"})
    harness.process(make_records("a"))  # before: deliver goes on from its checkpoint
    assert harness.deliver(make_records("b", first_sequence=2)).checkpoints == ["2"]
    assert harness.checkpoints == ["1", "2"]
    with pytest.raises(RuntimeError, match="deliver\\(\\) holds this harness's place"):
        harness.process(make_records("c", first_sequence=3))


def test_what_is_left_after_a_skip_and_a_hang_is_the_rest_of_the_batch(
    release: threading.Event,
) -> None:
    """Old records skipped at the first failure, then the young one hangs: it is left,
    to be delivered again by the next worker; the skipped ones are not."""
    attempts: list[int] = []

    def fails_then_hangs(records: list[Record]) -> None:
        attempts.append(len(records))
        if len(attempts) == 1:
            raise ValueError("first call fails")
        release.wait()

    old = make_records("a", "b", arrived=datetime.now(UTC) - timedelta(hours=2))
    young = make_records("c", first_sequence=3)
    policy = {"maxRecordAgeSeconds": 60, "then": "skip", "timeoutSeconds": 1}
    delivery = ProcessorHarness(fails_then_hangs, policy=policy).deliver(old + young)
    assert calls(delivery) == [["1", "2", "3"], ["3"]]
    assert delivery.skipped == old
    assert delivery.checkpoints == ["2"]
    assert delivery.hung is not None
    assert delivery.left == young
