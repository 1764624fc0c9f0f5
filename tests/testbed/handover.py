"""The operator's leader goes away under load (killed, or stopped by a rolling upgrade)
and a standby takes over: how long until every shard checkpoints again through the new
leader, and how long any shard stood still. Shared by the e2e tests and `make bench`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from testbed.recording import Report
from testbed.scenario import Scenario
from testbed.waiting import wait_for


@dataclass
class Handover:
    old_leader: str
    new_leader: str
    # leader gone -> every shard's checkpoint moved on in status (through the new leader)
    seconds: float
    longest_pause: float  # the longest any shard went without processing a record
    owners_before: dict[str, str]
    owners_after: dict[str, str]
    report: Report


def start_with_two_operators(scenario: Scenario, lease_seconds: float = 6.0) -> None:
    """4 shards, 2 workers, 2 operator replicas; returns once all 4 shards are owned 2/2."""
    scenario.start(shards=4, replicas=2, lease_seconds=lease_seconds, operators=2)
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "the first records")
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")


def _owners(scenario: Scenario) -> dict[str, str]:
    return {s: lease.get("owner", "") for s, lease in scenario.status()["leases"].items()}


def hand_over(scenario: Scenario, how: str) -> Handover:
    """`how`: "kill" (SIGKILL, the Lease must run out) or "upgrade" (as a RollingUpdate
    with maxSurge 1: a new replica is up, then the leader gets SIGTERM)."""
    old = wait_for_leader(scenario)
    before = _owners(scenario)
    if how == "upgrade":
        scenario.add_operator(f"{old}-next")
    with scenario.producing(every=0.1, count=4):
        time.sleep(2)
        positions = scenario.checkpoints()
        gone = time.time()
        if how == "kill":
            scenario.replicas[old].kill()
        else:
            scenario.replicas[old].terminate()
        wait_for(lambda: scenario.leader() not in (None, old), 60, "a new leader")

        def every_shard_moved_on() -> bool:
            now = scenario.checkpoints()
            return all(now.get(s) not in (None, at) for s, at in positions.items())

        wait_for(every_shard_moved_on, 90, "every shard checkpointing again", poll=0.1)
        seconds = time.time() - gone
        time.sleep(2)
    scenario.replicas[old].stop()  # (killed already, or winding down after SIGTERM)
    settled = time.time()
    wait_for(scenario.all_processed, 60, "every record put")
    report = scenario.report()
    return Handover(
        old_leader=old,
        new_leader=scenario.leader() or "",
        seconds=seconds,
        longest_pause=report.longest_pause(gone - 2, settled),
        owners_before=before,
        owners_after=_owners(scenario),
        report=report,
    )


def wait_for_leader(scenario: Scenario) -> str:
    wait_for(lambda: scenario.leader() in scenario.replicas, 60, "a leader")
    return scenario.leader() or ""
