"""The operator's leader frozen (SIGSTOP) past its Lease while records flow and a shard
splits, then resumed (SIGCONT) once a standby leads (issue 22). For the workers this is
an operator outage, and an outage costs a pause, never loss or double ownership: nothing
lost, no checkpoint or epoch in status ever goes backwards (over every version a watch
saw, not only at the end), the resumed replica stops leading, and the workers reach the
new leader within one worker lease of its taking over."""

from __future__ import annotations

import datetime
import itertools
import time
from typing import Any

from kubernetes import client as k8s

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.core.lineage import SHARD_END, expand
from streamconsumer.models import GROUP, PLURAL, VERSION
from testbed.handover import start_with_two_operators, wait_for_leader
from testbed.history import History, Version
from testbed.kinesis import list_all_shards, split_shard_in_half
from testbed.operator_process import LEADER_LEASE_SECONDS
from testbed.recording import Report
from testbed.scenario import Scenario
from testbed.waiting import happens_within, wait_for

WORKER_LEASE_SECONDS = 6.0  # spec.leases.durationSeconds (start_with_two_operators)
# The status is written about once a second: a checkpoint shows in it up to that late.
STATUS_MARGIN_SECONDS = 1.5
# Losing leadership ends the process; kopf takes a few seconds to wind down.
EXIT_WITHIN_SECONDS = 15.0
STATUS_WRITES = "streamconsumer_status_writes_total"
# When, not how many: a checkpoint accepted between reading a counter and the SIGSTOP
# would count as one accepted after the resume (it failed so once under load).
LAST_CHECKPOINT = "streamconsumer_last_checkpoint_timestamp_seconds"


def _order(checkpoint: str | None) -> tuple[int, int]:
    """Checkpoints in order: none yet, then sequence numbers as integers, SHARD_END last."""
    if checkpoint is None:
        return (0, 0)
    if checkpoint == SHARD_END:
        return (2, 0)
    return (1, int(checkpoint))


def _leases(version: Version) -> dict[str, dict[str, Any]]:
    return dict((version.body.get("status") or {}).get("leases") or {})


def _finished(version: Version) -> set[str]:
    return expand((version.body.get("status") or {}).get("finishedShards") or [])


def steps_back(versions: list[Version], t0: float) -> list[str]:
    """Every time a shard's checkpoint or epoch went below the highest it had shown. A
    shard that left the lease table as finished stands at SHARD_END from then on."""
    highest: dict[str, tuple[str | None, int]] = {}
    found = []
    for version in versions:
        when = f"+{version.at - t0:.1f}s (rv {version.resource_version})"
        for shard, lease in _leases(version).items():
            checkpoint, epoch = lease.get("checkpoint"), int(lease.get("epoch") or 0)
            best_checkpoint, best_epoch = highest.get(shard, (None, 0))
            if _order(checkpoint) < _order(best_checkpoint):
                found.append(f"{when}: {shard} checkpoint {best_checkpoint} -> {checkpoint}")
            if epoch < best_epoch:
                found.append(f"{when}: {shard} epoch {best_epoch} -> {epoch}")
            highest[shard] = (
                max(checkpoint, best_checkpoint, key=_order),
                max(epoch, best_epoch),
            )
        for shard in _finished(version):
            highest[shard] = (SHARD_END, highest.get(shard, (None, 0))[1])
    return found


def checkpointing_again(versions: list[Version], since: float) -> dict[str, float | None]:
    """For each shard open in the last status before `since`: when (time.time()) a
    status first showed its checkpoint moved on after `since` (None: never)."""
    before = [v for v in versions if v.at < since]
    assert before, "no status before the new leader took over"
    base = {
        shard: lease.get("checkpoint")
        for shard, lease in _leases(before[-1]).items()
        if lease.get("checkpoint") != SHARD_END
    }
    moved: dict[str, float | None] = dict.fromkeys(base)
    for version in versions:
        if version.at < since:
            continue
        leases, finished = _leases(version), _finished(version)
        for shard, checkpoint in base.items():
            now = SHARD_END if shard in finished else leases.get(shard, {}).get("checkpoint")
            if moved[shard] is None and now != checkpoint:
                moved[shard] = version.at
    return moved


def overlapping_owners(report: Report) -> list[str]:
    """Shards two workers processed over overlapping spans of time (double ownership)."""
    spans: dict[str, dict[str, list[float]]] = {}
    for event in report.events:
        span = spans.setdefault(event["shard"], {}).setdefault(event["worker"], [event["t"]] * 2)
        span[1] = event["t"]
    found = []
    for shard, by_worker in spans.items():
        ordered = sorted(by_worker.items(), key=lambda item: item[1][0])
        for (a, (_, a_last)), (b, (b_first, _)) in itertools.pairwise(ordered):
            if b_first < a_last:
                found.append(f"{shard}: {b} from {b_first:.2f} while {a} until {a_last:.2f}")
    return found


def _seconds(micro_time: str) -> float:
    return datetime.datetime.fromisoformat(micro_time).timestamp()


def test_a_frozen_leader_resumed_after_a_takeover_and_a_split(scenario: Scenario) -> None:
    t0 = time.time()
    namespace, name = scenario.namespace, scenario.name
    statuses = History(
        k8s.CustomObjectsApi(scenario.api_client).list_namespaced_custom_object,
        name,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
    )
    leases = History(
        k8s.CoordinationV1Api(scenario.api_client).list_namespaced_lease,
        OperatorConfig.model_fields["leader_lease_name"].default,
        namespace,
    )
    start_with_two_operators(scenario, lease_seconds=WORKER_LEASE_SECONDS)
    old = wait_for_leader(scenario)
    frozen = scenario.replicas[old]
    client = scenario.kinesis.client
    parent = sorted(s["ShardId"] for s in list_all_shards(client, scenario.stream))[0]
    labels = {"namespace": namespace, "consumer": name}

    with scenario.producing(every=0.1, count=4):
        time.sleep(2)
        # Freeze just after a status write: the next is a second away, so no write of
        # the old leader is in flight across the freeze (its counter then says whether
        # it wrote after the resume).
        seen = len(statuses.snapshot())
        wait_for(lambda: len(statuses.snapshot()) > seen, 10, "a status write")
        time.sleep(0.3)
        writes_before = frozen.metric(STATUS_WRITES, **labels)
        last_checkpoint = frozen.metric(LAST_CHECKPOINT, **labels)
        assert last_checkpoint, "the leader shows no accepted checkpoint: the gauge is broken"
        frozen_at = time.time()
        frozen.pause()
        try:
            split_shard_in_half(client, scenario.stream, parent)
            split_at = time.time()
            wait_for(lambda: scenario.leader() not in (None, old), 60, "a standby to lead")
            new = scenario.leader() or ""
            took_over = min(
                _seconds(v.body["spec"]["acquireTime"])
                for v in leases.snapshot()
                if v.at > frozen_at and v.body["spec"].get("holderIdentity") == new
            )
            children = [
                s["ShardId"]
                for s in list_all_shards(client, scenario.stream)
                if s.get("ParentShardId") == parent
            ]

            def new_leader_runs_it_all() -> bool:
                moved = checkpointing_again(statuses.snapshot(), took_over)
                now = scenario.status().get("leases", {})
                return all(moved.values()) and all(now.get(c, {}).get("owner") for c in children)

            # Held frozen until the new leader runs everything (children included), so
            # the old one comes back to a world that moved on without it.
            happens_within(
                new_leader_runs_it_all, WORKER_LEASE_SECONDS + STATUS_MARGIN_SECONDS + 15
            )
        finally:
            resuming_at = time.time()  # anything it accepted before the freeze is older
            frozen.resume()
        resumed_at = time.time()

        # The resumed replica: does it exit, stop taking worker calls, stop writing?
        writes_after: float | None = None
        took_calls: bool | None = None
        while time.time() - resumed_at < EXIT_WITHIN_SECONDS and frozen.exit_code() is None:
            writes = frozen.metric(STATUS_WRITES, **labels)
            if writes is not None and writes_before is not None:
                writes_after = writes - writes_before
            last_checkpoint = frozen.metric(LAST_CHECKPOINT, **labels) or last_checkpoint
            answer = frozen.takes_worker_calls(namespace, name)
            took_calls = answer if answer is not None else took_calls
            time.sleep(0.2)
        exit_code = frozen.exit_code()
        exited_after = time.time() - resumed_at
        time.sleep(3)  # records keep flowing after the old leader is gone

    happens_within(scenario.all_processed, 90, poll=0.5)  # the assertions say what is missing
    status_versions = statuses.stop()
    lease_versions = leases.stop()
    report = scenario.report()

    moved = checkpointing_again(status_versions, took_over)
    late = [shard for shard, at in moved.items() if at is None]
    catch_up = max((at for at in moved.values() if at is not None), default=took_over) - took_over
    backwards = steps_back(status_versions, t0)
    holders_after = [
        v.body["spec"].get("holderIdentity") for v in lease_versions if v.at > resumed_at
    ]
    doubled = overlapping_owners(report)
    moves = {s: owners for s, owners in report.shard_owners.items() if len(owners) > 1}
    gone = f"after {exited_after:.1f} s" if exit_code is not None else "still running"
    print(
        f"\nfrozen {old} for {resumed_at - frozen_at:.1f} s (leader Lease "
        f"{LEADER_LEASE_SECONDS:g} s); split {parent} -> {children} at "
        f"+{split_at - frozen_at:.1f} s; {new} took over at +{took_over - frozen_at:.1f} s"
        f"\nevery open shard checkpointing again through {new} {catch_up:.1f} s after it "
        f"took over (worker lease {WORKER_LEASE_SECONDS:g} s); never: {late}"
        f"\nold replica after the resume: exit code {exit_code} "
        f"({gone}), "
        f"took worker calls: {took_calls}, status writes {writes_after}, "
        f"last checkpoint accepted {last_checkpoint - resuming_at:+.2f} s from the resume; "
        f"Lease holders since: {set(holders_after)}"
        f"\n{len(status_versions)} status versions watched ({statuses.gaps} gaps), "
        f"steps back: {backwards}"
        f"\nrecords: {len(scenario.produced)} put, {len(report.lost)} lost, "
        f"{report.duplicates} duplicates; shards that changed worker: {moves}; "
        f"overlapping owners: {doubled}"
    )
    assert frozen.server is not None
    print(f"the old replica's log, last lines:\n{frozen.server.log_tail(8)}")

    assert report.lost == set(), f"{len(report.lost)} records lost"
    assert report.order_violations == []
    assert statuses.gaps == 0, "the watch missed versions: steps back may be unseen"
    assert backwards == [], "a checkpoint or an epoch in status went backwards"
    assert old not in holders_after, "the resumed replica took the Lease back"
    assert took_calls is not True, "the resumed replica took worker calls"
    # Losing leadership ends the process: a deposed replica still running kopf would
    # reconcile beside the new leader.
    assert exit_code is not None, f"the resumed replica still runs {exited_after:.0f} s on"
    assert not writes_after, f"the resumed replica wrote status {writes_after} times"
    # As last read: a replica that exits at once after the resume is not read again.
    assert last_checkpoint < resuming_at, (
        f"the resumed replica accepted a checkpoint {last_checkpoint - resuming_at:.2f} s "
        "after the resume"
    )
    assert doubled == [], "two workers processed a shard at once"
    assert not late, f"shards never checkpointed through the new leader: {late}"
    # Within one worker lease (plus the status write that shows it): a closing request
    # sent to the frozen replica (the split parent's SHARD_END) is given up and sent
    # again to the new leader within the lease (WorkerCore.waiting_timeout).
    bound = WORKER_LEASE_SECONDS + STATUS_MARGIN_SECONDS
    assert catch_up <= bound, f"workers reached the new leader {catch_up:.1f} s after it took over"
