"""Issue 11's bugs, each kept as the smallest case that showed it (they were written
as failing cases against the code as it was, before any fix). The simulation in
tests/sim finds each of them too when its fix is reverted; these say it in a few lines."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState, durable_from_status
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.auth import KubePodOwners, TokenReviewer
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import CheckpointRequest, HeartbeatRequest, HeldShard
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Progress, Record
from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.testing import ProcessorHarness
from streamconsumer.worker.shard import Stop, Wait
from testbed.specs import consumer_spec
from testbed.tokens import token

from .moments import CREATED
from .shard_drive import Drive, batch
from .worker_heartbeat import heartbeat_answer

SPEC = consumer_spec(lease_seconds=10)  # the tests that lower the lease lower it from 10 s


def beat(coordinator: LeaseCoordinator, worker: str, now: float, *held: tuple[str, int]):  # type: ignore[no-untyped-def]
    request = HeartbeatRequest(
        worker=worker, held=[HeldShard(shard_id=s, epoch=e) for s, e in held]
    )
    return coordinator.heartbeat(request, now)


def finish(coordinator: LeaseCoordinator, shard_id: str) -> None:
    lease = coordinator.leases[shard_id]
    assert lease.owner is not None
    coordinator.checkpoint(
        CheckpointRequest(
            worker=lease.owner, shard_id=shard_id, epoch=lease.epoch, sequence_number=SHARD_END
        )
    )


# --- the operator's lease table ------------------------------------------------------------


def test_split_then_merge_back_never_restarts_the_original_shard() -> None:
    """11.1: lineage forgot a finished grandparent once its children's leases left."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("p", closed=True)])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    finish(coordinator, "p")
    split = [
        Shard("p", closed=True),
        Shard("c1", ("p",), closed=True),
        Shard("c2", ("p",), closed=True),
        Shard("m", ("c1", "c2")),
    ]
    coordinator.set_shards(split)
    coordinator.step(1.0)  # c1, c2 granted; p collected once they started
    finish(coordinator, "c1")
    finish(coordinator, "c2")
    coordinator.step(2.0)  # m granted; c1, c2 collected
    coordinator.step(3.0)
    assert "p" not in coordinator.leases, "the finished original shard was granted again"
    assert coordinator.finished == {"p", "c1", "c2"}


def test_a_grant_reaches_no_worker_before_the_status_holds_it() -> None:
    """11.5: a grant left the operator before it was saved."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    assert coordinator.persisted_version < coordinator.version
    response = beat(coordinator, "a", 0.1)
    assert response.assignments == []
    assert response.next_heartbeat_ms is not None, "asked to come back soon"
    coordinator.persisted(coordinator.snapshot(0.2), coordinator.version)
    assert [a.shard_id for a in beat(coordinator, "a", 0.3).assignments] == ["s0"]


def test_lowering_the_lease_duration_waits_out_fences_already_promised() -> None:
    """11.8: a shorter lease duration expired workers whose fences ran on the longer one."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    epoch = coordinator.leases["s0"].epoch
    beat(coordinator, "a", 1.0, ("s0", epoch))  # a's fence now runs to 1.0 + 10 s
    coordinator.update_spec(consumer_spec(lease_seconds=2))
    coordinator.step(5.0)
    assert coordinator.leases["s0"].owner == "a", "expired while its fence is still open"
    coordinator.step(15.0)
    assert coordinator.leases["s0"].owner != "a", "expired once the longer promise ran out"


def test_a_restart_after_lowering_the_lease_waits_for_the_longer_one() -> None:
    """11.8 with a restart: the status keeps the longest lease still promised."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    coordinator.persisted(coordinator.snapshot(0.0), coordinator.version)
    beat(coordinator, "a", 1.0, ("s0", coordinator.leases["s0"].epoch))
    coordinator.update_spec(consumer_spec(lease_seconds=2))
    saved = coordinator.snapshot(2.0)
    assert saved.promised_lease_seconds == 10
    restarted = LeaseCoordinator(consumer_spec(lease_seconds=2), saved, now=3.0, created=CREATED)
    restarted.set_shards([Shard("s0")])
    restarted.step(8.0)
    assert restarted.leases["s0"].owner == "a"


def test_a_shard_that_left_the_stream_unfinished_loses_its_lease() -> None:
    """11.12: leases of shards trimmed by retention stayed forever."""
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    changes = coordinator.set_shards([Shard("s1")])  # s0 trimmed by retention
    assert changes.expired_unfinished == ["s0"]
    assert "s0" not in coordinator.leases
    lost = beat(coordinator, "a", 1.0, ("s0", 1)).revocations
    assert [(r.shard_id, r.reason.value) for r in lost] == [("s0", "lost")]


# --- the worker's per-shard machine, driven without threads ------------------------------


class FailsOnTwo(BaseRecordProcessor):
    """Processes record 1; record 2's batch keeps raising (a sink that is down)."""

    def __init__(self) -> None:
        self.processed: list[str] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if records[0].sequence_number == "2":
            raise OSError("sink down")
        self.processed += [r.sequence_number for r in records]
        checkpointer.checkpoint()


def test_handoff_after_an_outage_checkpoints_only_processed_records() -> None:
    """11.2: the fence closed while batch 2 was retried; the hand-off then stored it."""
    processor = FailsOnTwo()
    drive = Drive(processor, fence=0.5)  # the operator goes away while batch 2 is retried
    drive.machine.read(batch(1))
    drive.machine.read(batch(2))
    drive.run(until=1.0)
    assert drive.machine.next(drive.clock) == Wait(), "fenced: nothing delivered"
    drive.machine.renew(100.0)  # the operator is back...
    drive.machine.revoke(Stop.HANDOFF)  # ...and moves the shard
    drive.run(until=2.0)
    assert processor.processed == ["1"]
    assert drive.stored() == ["1", "1"], "the release carries 1: record 2 was never done"
    assert drive.sent[-1].release


def test_a_handoff_release_carries_the_position() -> None:
    """11.7: a release without a position replayed a planned move after a restart."""

    class Lazy(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            pass  # checkpoints only on shutdown

    drive = Drive(Lazy())
    drive.machine.read(batch(1, 2))
    drive.run(until=0.5)
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=1.0)
    release = drive.sent[-1]
    assert release.release
    assert release.sequence_number == "2"
    assert release.wait, "let go only once the status holds it"


def test_a_handoff_interrupts_a_poison_batch() -> None:
    """11.10: retries of a poison batch blocked every hand-off."""

    class Poison(BaseRecordProcessor):
        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            raise ValueError("poison record")

    drive = Drive(Poison())
    drive.machine.read(batch(1))
    drive.run(until=30.0)  # retrying with back-off
    drive.machine.revoke(Stop.HANDOFF)
    drive.run(until=drive.clock + 0.1)
    assert drive.machine.outcome is not None, "still retrying after the hand-off"
    assert drive.stored() == [None], "released with nothing processed"


def test_a_revocation_applied_before_the_renewal_stops_delivery() -> None:
    """11.9: the fence was renewed before revocations were applied."""
    drive = Drive(FailsOnTwo(), fence=0.5)
    drive.machine.read(batch(1))
    drive.machine.revoke(Stop.LOST)  # the answer took the shard away...
    drive.machine.renew(100.0)  # ...and renewed the fences of the others
    drive.run(until=1.0)
    assert drive.sent == []
    assert drive.machine.outcome is not None


# --- Spark/bronze batching ----------------------------------------------------------------


class FlakySink(BatchingProcessor):
    def __init__(self) -> None:
        super().__init__(stream="s", max_records=2, max_wait=60)
        self.failures = 1
        self.committed: list[str] = []

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("storage unavailable")
        self.committed += [r.sequence_number for r in records]


def test_a_retried_sink_commit_writes_each_record_once() -> None:
    """11.3: a retried batch was added to the buffer again."""
    drive = Drive(FlakySink())
    drive.machine.read(batch(1, 2))
    drive.run(until=5.0)
    sink = drive.processor
    assert isinstance(sink, FlakySink)
    assert sink.committed == ["1", "2"]
    assert drive.stored() == ["2"]


def test_progress_forgets_what_a_raising_call_asked_for() -> None:
    progress = Progress("s")
    progress.begin(batch(1, 2).records)
    Checkpointer(progress).checkpoint()
    progress.raised()
    assert progress.pending() is None


# --- the operator's API -------------------------------------------------------------------


def test_a_failing_token_review_answers_503_not_500() -> None:
    """11.13: an apiserver that cannot review tokens answered 500."""
    configuration = k8s.Configuration()
    configuration.host = "https://127.0.0.1:9"  # nothing listens there
    configuration.retries = 0
    api_client = k8s.ApiClient(configuration)
    reviewer = TokenReviewer(
        k8s.AuthenticationV1Api(api_client), KubePodOwners.of(api_client), timeout=2
    )

    api = WorkerApi(Registry(time.monotonic, startup_grace=0), reviewer, time.monotonic)
    assert heartbeat_answer(api, token()) == (503, "1")


# --- found by the simulation ----------------------------------------------------------------


def test_a_failed_flush_leaves_no_record_of_the_call_in_the_buffer() -> None:
    """A record of a call that raised must not stay buffered: a later flush (on shutdown)
    would commit it, then could not checkpoint it, and the next owner would commit it
    again."""

    class Sink(BatchingProcessor):
        def __init__(self) -> None:
            super().__init__(stream="s", max_records=3, max_wait=60)
            self.fail = False
            self.committed: list[str] = []

        def commit(self, records: list[Record], batch: BatchInfo) -> None:
            if self.fail:
                raise OSError("storage unavailable")
            self.committed += [r.sequence_number for r in records]

    sink = Sink()
    harness = ProcessorHarness(sink, "s")
    harness.initialize()
    harness.process(batch(1, 2).records)  # buffered: done as far as the worker knows
    sink.fail = True
    with pytest.raises(OSError, match="storage unavailable"):
        harness.process(batch(3).records)  # the flush of 1..3 fails
    sink.fail = False
    harness.shutdown()  # a hand-off comes before any retry
    assert sink.committed == ["1", "2"]
    assert harness.checkpoints == ["2"], "record 3 is left for the next owner"


def test_the_engine_serves_started_shards_before_its_first_listing() -> None:
    """After a restart while Kinesis is slow, draining workers still hand off and silent
    ones still expire (the shards already started need no listing)."""
    status = {
        "leases": {
            "s0": {"owner": "a", "epoch": 3, "state": "Active", "checkpoint": "5"},
            "s1": {"owner": "a", "epoch": 1, "state": "Active"},
        }
    }
    coordinator = LeaseCoordinator(SPEC, durable_from_status(status), now=0.0, created=CREATED)
    assert not coordinator.shards_known
    coordinator.heartbeat(
        HeartbeatRequest(
            worker="a",
            held=[HeldShard(shard_id="s0", epoch=3), HeldShard(shard_id="s1", epoch=1)],
            draining=True,
        ),
        0.1,
    )
    beat(coordinator, "b", 0.1)
    coordinator.step(0.2)
    assert {lease.state.value for lease in coordinator.leases.values()} == {"HandOff"}
    assert coordinator.finished == set(), "nothing is collected without a listing"


def test_a_draining_owners_last_report_does_not_hide_a_measured_backlog() -> None:
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0")])
    beat(coordinator, "a", 0.0)
    coordinator.step(0.0)
    coordinator.heartbeat(
        HeartbeatRequest(
            worker="a",
            held=[HeldShard(shard_id="s0", epoch=1, millis_behind_latest=0)],
            draining=True,
        ),
        1.0,
    )
    coordinator.set_backlog({"s0": 2080}, 1.1)
    assert coordinator.lag_millis() == {"s0": 2080}
