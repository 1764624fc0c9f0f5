"""Crashes: a killed worker's shards move on after its lease; an operator restart loses
nothing and moves nothing."""

from __future__ import annotations

import time

from testbed.kinesis import list_all_shards
from testbed.scenario import Scenario
from testbed.waiting import wait_for

LEASE = 6.0


def test_killed_worker_shards_are_taken_over_after_the_lease(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=2, lease_seconds=LEASE)
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "the first records")
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 30, "2/2 balance")
    owners = scenario.owners()
    victim = sorted(owners)[0]
    victim_shards = {
        s for s, lease in scenario.status()["leases"].items() if lease.get("owner") == victim
    }
    killed_at = scenario.crash_worker(victim)
    scenario.produce(200)
    wait_for(scenario.all_processed, 90, "records of the killed worker's shards")

    report = scenario.delivered(duplicates_at_most=None)
    for shard in victim_shards:
        assert report.shard_owners[shard][-1] != victim
        resumed = report.first_processed(shard, after=killed_at, besides=victim)
        assert resumed is not None
        took_over = resumed - killed_at
        # Expiry needs the lease plus its grace (a third), then a heartbeat for the grant;
        # the rest is slack for a loaded 2-core machine.
        assert 0 < took_over <= LEASE * 4 / 3 + LEASE / 3 + 5, took_over
    # The recording processor checkpoints after every batch (at most 100 records), so only
    # the batch in flight when the worker died may be processed twice.
    assert report.duplicates <= 100 * len(victim_shards)
    assert any(r == "LeaseExpired" and victim in m for r, m in scenario.events())


def test_operator_restart_loses_nothing_and_moves_nothing(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=2, lease_seconds=LEASE)
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "the first records")
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 30, "2/2 balance")
    before = scenario.status()["leases"]

    assert scenario.operator is not None
    scenario.operator.kill()
    scenario.produce(100)  # processed while the operator is down, until the leases run out
    time.sleep(2)
    scenario.start_operator()
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "records across the restart")

    report = scenario.delivered()
    for shard, owners in report.shard_owners.items():
        assert len(owners) == 1, f"{shard} changed hands across a restart: {owners}"

    def holders(leases: dict[str, dict[str, object]]) -> dict[str, tuple[object, object]]:
        return {shard: (lease["owner"], lease["epoch"]) for shard, lease in leases.items()}

    assert holders(scenario.status()["leases"]) == holders(before), "same leases, same epochs"


def test_scale_to_zero_and_back_resumes_from_checkpoints(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=2, lease_seconds=LEASE)
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "the first records")
    scenario.scale(0)
    wait_for(lambda: not scenario.owners(), 60, "every lease released")
    kubelet = scenario.kubelet
    assert kubelet is not None
    wait_for(lambda: not kubelet.running(), 60, "worker processes gone")
    scenario.produce(200)
    time.sleep(1)
    assert scenario.report().lost, "nobody consumes at zero replicas"
    scenario.scale(2)
    wait_for(scenario.all_processed, 60, "records after scaling back")

    scenario.delivered()
    checkpoints = [lease.get("checkpoint") for lease in scenario.status()["leases"].values()]
    assert all(checkpoints)
    assert len(list_all_shards(scenario.kinesis.client, scenario.stream)) == 4
