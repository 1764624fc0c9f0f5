"""A bounded consumer (`spec.end`, docs/replaying.md): each shard ends at its first record
past the end, or once reads begun after the grace find it caught up; the operator takes
that SHARD_END on an open shard, says Complete once every shard has ended, grants nothing
more, scales the workers to zero, and serves no worker too old to keep the end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from streamconsumer.controller.consumer.autoscaler import Autoscaler
from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.render import Children, Generations, render
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api.answers import Reply, admit
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.controller.workloads.children import deployment
from streamconsumer.core.leases import FINISHED, CheckpointDeferred, CheckpointRefused
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import CheckpointRequest, HeartbeatRequest, HeldShard
from streamconsumer.models.api import ENDS_WIRE_VERSION
from streamconsumer.models.resource import END_GRACE_SECONDS, End
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.sources.kinesis_fanout import ReadSide
from streamconsumer.worker.ending import ConsumerEnd
from testbed.specs import consumer_spec

from .fenced import fenced_consumer
from .moments import CREATED
from .shard_drive import Drive

END = datetime(2026, 1, 1, 5, tzinfo=UTC)
AT = END.timestamp()


def record(sequence: int, seconds_after_end: float) -> Record:
    arrived = END + timedelta(seconds=seconds_after_end)
    return Record(b"d", "k", str(sequence), arrived, checkpoint_sequence=str(sequence))


def read(*records: Record, behind: int = 0, said: bool = True) -> ReadResult:
    """A read; `said`: the stream said where its tip is (not a local wait, not DynamoDB)."""
    return ReadResult(list(records), millis_behind_latest=behind, at_tip=said and not behind)


# --- the worker's side ------------------------------------------------------------------


def test_a_read_is_cut_at_its_first_record_past_the_end() -> None:
    end = ConsumerEnd(AT)
    cut = end.cut(read(record(1, -2), record(2, 0), record(3, 0.001), record(4, -1)))
    assert [r.sequence_number for r in cut.records] == ["1", "2"], "at the end is in"
    assert cut.shard_end
    whole = read(record(1, -2), record(2, 0))
    assert end.cut(whole) is whole


def test_a_quiet_shard_ends_after_two_caught_up_reads_begun_past_the_grace() -> None:
    end = ConsumerEnd(AT)
    after = AT + END_GRACE_SECONDS
    for began, batch, ends in [
        (after - 0.1, read(), False),  # too soon: a record put now may still be before
        (after, read(), False),  # one quiet read: maybe a page of nothing
        (after + 1, read(behind=500), False),  # behind: not caught up, starts over
        (after + 1.5, read(), False),
        (after + 1.7, read(said=False), False),  # a wait with no event: says nothing
        (after + 2, read(), False),
        (after + 3, read(), True),
    ]:
        end.reading(began)
        assert end.caught_up(batch) is ends
    unknown = ConsumerEnd(AT)
    for _ in range(3):
        unknown.reading(None)  # no wall clock: never by the clock
        assert not unknown.caught_up(read())


class Recording(BaseRecordProcessor):
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.ended = False

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.seen += [r.sequence_number for r in records]
        checkpointer.checkpoint()

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self.ended = True
        checkpointer.checkpoint()


def test_the_machine_delivers_up_to_the_end_then_ends_the_shard() -> None:
    processor = Recording()
    drive = Drive(processor, end=END)
    drive.machine.read(read(record(1, -3), record(2, -1)))
    drive.machine.read(read(record(3, 0), record(4, 2), record(5, 3)))
    assert not drive.machine.wants_read(), "nothing past the end is read on"
    drive.run(until=5.0)
    assert processor.seen == ["1", "2", "3"]
    assert processor.ended
    assert [r.sequence_number for r in drive.sent] == ["2", "3", SHARD_END]


def test_the_machine_ends_a_quiet_shard_by_the_reads_it_began() -> None:
    processor = Recording()
    drive = Drive(processor, end=END)
    drive.machine.read(read(record(1, -3)))
    for began in (AT + END_GRACE_SECONDS + 1, AT + END_GRACE_SECONDS + 2):
        drive.machine.reading(drive.clock, began)
        drive.machine.read(read())
    drive.run(until=5.0)
    assert processor.seen == ["1"]
    assert drive.sent[-1].sequence_number == SHARD_END


# --- the operator's side ------------------------------------------------------------------

BOUNDED = consumer_spec(lease_seconds=10, end={"timestamp": END.isoformat()})


def test_an_end_is_a_timestamp_or_the_creation_never_both_nor_neither() -> None:
    assert End(timestamp=END).instant(CREATED) == END
    assert End(at_creation=True).instant(CREATED) == CREATED
    for bad in ({}, {"timestamp": END, "at_creation": True}, {"at_creation": False}):
        with pytest.raises(ValidationError, match="exactly one"):
            End(**bad)


def bounded(spec=BOUNDED) -> LeaseCoordinator:  # type: ignore[no-untyped-def]
    coordinator = LeaseCoordinator(spec, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    return coordinator


def granted(coordinator: LeaseCoordinator) -> dict[str, int]:
    coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.0)
    coordinator.step(0.0)
    coordinator.persisted(coordinator.snapshot(0.0), coordinator.version)
    answer = coordinator.heartbeat(HeartbeatRequest(worker="a"), 0.1)
    assert all(a.end == coordinator.end for a in answer.assignments)
    return {a.shard_id: a.epoch for a in answer.assignments}


def ended(coordinator: LeaseCoordinator, shard: str, epoch: int) -> None:
    request = CheckpointRequest(worker="a", shard_id=shard, epoch=epoch, sequence_number=SHARD_END)
    assert coordinator.checkpoint(request).state is FINISHED


def test_a_bounded_consumer_completes_once_every_open_shard_ended_and_grants_no_more() -> None:
    coordinator = bounded()
    epochs = granted(coordinator)
    assert coordinator.end == END
    ended(coordinator, "s0", epochs["s0"])
    coordinator.step(1.0)
    assert not coordinator.completed
    ended(coordinator, "s1", epochs["s1"])
    coordinator.step(2.0)
    assert not coordinator.completed, "a listing from before the ends may lack children"
    assert coordinator.listings.relist_wanted
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    coordinator.step(2.5)
    assert coordinator.completed
    coordinator.set_shards([Shard("s0"), Shard("s1"), Shard("s2", parents=("s1",))])
    held = [HeldShard(shard_id=s, epoch=e) for s, e in epochs.items()]
    coordinator.heartbeat(HeartbeatRequest(worker="a", held=held), 3.0)
    coordinator.step(3.0)
    later = coordinator.heartbeat(HeartbeatRequest(worker="a"), 3.1)
    assert later.assignments == [], "a shard listed after Complete was born after the end"
    assert coordinator.completed


def test_an_unbounded_consumer_still_refuses_shard_end_on_an_open_shard() -> None:
    coordinator = bounded(consumer_spec(lease_seconds=10))
    epochs = granted(coordinator)
    request = CheckpointRequest(
        worker="a", shard_id="s0", epoch=epochs["s0"], sequence_number=SHARD_END
    )
    with pytest.raises(CheckpointDeferred):  # until a listing made after it
        coordinator.checkpoint(request)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    with pytest.raises(CheckpointRefused):
        coordinator.checkpoint(request)


def test_an_end_at_creation_is_the_objects_creation_time() -> None:
    coordinator = bounded(consumer_spec(lease_seconds=10, end={"atCreation": True}))
    assert coordinator.end == CREATED


def test_complete_is_a_steady_state_with_its_event_once_and_no_workers() -> None:
    coordinator = bounded()
    loop = ConsumerLoop(
        "c", coordinator, LoopSettings(), generation=lambda: 1, autoscaler=Autoscaler(2)
    )
    loop.write_succeeded(loop.write_due(0.0), 0.0)  # type: ignore[arg-type]
    epochs = granted(coordinator)
    for shard, epoch in epochs.items():
        ended(coordinator, shard, epoch)
    coordinator.set_shards([Shard("s0"), Shard("s1")])  # a listing after the ends
    loop.step(1.0)
    loop.step(2.0)
    assert [e.reason for e in loop.take_events()].count("Complete") == 1
    assert loop.autoscale(2.0) == (2, 0, 0.0)
    applied = Children(known=True)
    status = render(
        "c", coordinator, coordinator.snapshot(2.0), Generations(1, 1), [], [], children=applied
    )
    conditions = {c.type: c for c in status.conditions}
    assert (conditions["Complete"].status, conditions["Complete"].reason) == ("True", "EndReached")
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("True", "Complete")
    assert conditions["Reconciling"].status == conditions["Stalled"].status == "False"
    manifest = deployment("ns", "c", BOUNDED, "http://op", "aud", complete=True)
    assert manifest["spec"]["replicas"] == 0


def test_an_unbounded_consumer_has_no_complete_condition() -> None:
    coordinator = bounded(consumer_spec(lease_seconds=10))
    status = render("c", coordinator, coordinator.snapshot(0.0), Generations(1, 1), [], [])
    assert "Complete" not in {c.type for c in status.conditions}


def test_a_worker_too_old_to_keep_the_end_is_served_nothing() -> None:
    registry = Registry(lambda: 0.0, startup_grace=0.0)
    registry.add(fenced_consumer("n", "c", bounded()))
    worker = Caller("n", "c-worker", "c-w-1", "u", consumer="c", consumer_account="c-worker")
    for header in (None, "2"):  # the wire before versions, and the last before ends
        refused = admit(worker, "n", "c", registry, header)
        assert isinstance(refused, Reply)
        assert refused.status == 400
        assert "need wire version 3" in refused.body["message"]
    assert not isinstance(admit(worker, "n", "c", registry, str(ENDS_WIRE_VERSION)), Reply)


def test_an_open_shards_end_before_the_consumers_is_taken_as_any_other() -> None:
    """A reader that ends an open shard before the end has come (a bug) is refused as for
    an unbounded consumer: the worker hands the shard back and it is read on."""
    coordinator = LeaseCoordinator(
        BOUNDED, DurableState(), now=0.0, created=CREATED, wall=lambda: END - timedelta(seconds=1)
    )
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    epochs = granted(coordinator)
    request = CheckpointRequest(
        worker="a", shard_id="s0", epoch=epochs["s0"], sequence_number=SHARD_END
    )
    with pytest.raises(CheckpointDeferred):
        coordinator.checkpoint(request)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    with pytest.raises(CheckpointRefused):
        coordinator.checkpoint(request)


def test_a_split_just_before_the_end_has_its_children_read_though_the_listing_was_older() -> None:
    """s0 split before the end, and its reader's SHARD_END came before the operator
    listed again: Complete waits for a listing started after it, which shows s0's
    children, granted and read to the end in turn."""
    coordinator = bounded()
    epochs = granted(coordinator)
    for shard, epoch in epochs.items():
        ended(coordinator, shard, epoch)
    coordinator.step(1.0)
    assert not coordinator.completed
    split = [Shard("s0", closed=True), Shard("s1"), Shard("c1", ("s0",)), Shard("c2", ("s0",))]
    coordinator.set_shards(split)
    coordinator.step(2.0)
    assert not coordinator.completed
    held = [HeldShard(shard_id=s, epoch=e) for s, e in epochs.items()]
    coordinator.heartbeat(HeartbeatRequest(worker="a", held=held), 2.0)
    coordinator.step(2.0)
    coordinator.persisted(coordinator.snapshot(2.0), coordinator.version)
    answer = coordinator.heartbeat(HeartbeatRequest(worker="a"), 2.1)
    assert sorted(a.shard_id for a in answer.assignments) == ["c1", "c2"]


def test_only_the_stream_says_a_shard_is_at_its_tip_never_a_wait() -> None:
    """An enhanced fan-out subscription that waited with no event (a subscription not
    open yet, ResourceInUse on a hand-off, a stall) says nothing of the tip, whatever
    the last event said: else a replay, its end long past, ended shards it never read."""
    side = ReadSide(previous=None)
    assert not side.idle().at_tip, "before any event"
    caught_up = side.event(
        {"Records": [], "MillisBehindLatest": 0, "ContinuationSequenceNumber": "1"}
    )
    assert caught_up.at_tip
    assert not side.idle().at_tip, "after one"
