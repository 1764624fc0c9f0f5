"""Operator N serves workers N and N-1 (docs/upgrades.md): workers running the previous
release's code (tests/releases/, unpacked first on their PYTHONPATH) keep consuming while
the operator, two replicas of the previous release behind a Service, is rolled to this
checkout's code one replica at a time — the chart's CRD upgraded with it, as `helm
upgrade` does. Records flow throughout; nothing lost, nothing processed twice, no worker
restarted, and the old workers carry on through the new leader. The new replicas keep
the table in a lease log: the previous release's layout migrates on the way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import streamconsumer
from streamconsumer.controller.leases.lease_log import head_of
from testbed import releases
from testbed.controlplane import ControlPlane
from testbed.operator_process import LEASE_GROUPS_PAST_TWO
from testbed.recording import packages
from testbed.scenario import Scenario
from testbed.waiting import wait_for

THIS_PACKAGE = Path(streamconsumer.__file__).resolve().parent


@pytest.fixture
def previous_crd(control_plane: ControlPlane) -> Iterator[None]:
    """The previous release's CRD for the test; this checkout's again afterwards, for the
    rest of the session."""
    releases.apply_crd(control_plane, releases.PREVIOUS_CRD)
    try:
        yield
    finally:
        releases.apply_crd(control_plane, releases.CURRENT_CRD)


def _ran(scenario: Scenario, replica: str) -> list[str]:
    return releases.launched_from(scenario.replicas[replica].log_path)


def _replace_one(scenario: Scenario, old_replicas: list[str], new: str) -> None:
    """One step of the rollout: replica `new` (this checkout) starts, an old one gets
    SIGTERM (the leader while one leads), a leader other than it takes over and every
    shard checkpoints again."""
    leader = scenario.leader()
    going = leader if leader in old_replicas else None
    going = going or next(r for r in old_replicas if scenario.replicas[r].server)
    scenario.add_operator(new)
    positions = scenario.checkpoints()
    scenario.replicas[going].terminate()
    wait_for(lambda: scenario.leader() not in (None, going), 60, f"a leader after {going}")
    scenario.replicas[going].stop()

    def every_shard_moved_on() -> bool:
        now = scenario.checkpoints()
        return all(now.get(s) not in (None, at) for s, at in positions.items())

    def replicas() -> str:
        tails = (
            f"--- {name}: {releases.launched_from(r.log_path)}\n{r.server.log_tail(12)}"
            for name, r in scenario.replicas.items()
            if r.server is not None
        )
        return f"leader {scenario.leader()}\n" + "\n".join(tails)

    wait_for(
        every_shard_moved_on,
        90,
        f"every shard checkpointing again after {going} went",
        details=replicas,
    )


def test_previous_workers_ride_through_a_rolling_upgrade_of_the_operator(
    scenario: Scenario, control_plane: ControlPlane, previous_crd: None, tmp_path: Path
) -> None:
    previous = releases.unpack_previous(tmp_path / "previous")
    old_package = (previous / "streamconsumer").resolve()
    assert old_package != THIS_PACKAGE
    scenario.start(
        shards=4,
        replicas=2,
        lease_seconds=6.0,
        operators=2,
        operator_code=previous,
        worker_code=previous,
    )
    assert scenario.kubelet is not None
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "the first records")
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")
    old_replicas = list(scenario.replicas)
    for replica in old_replicas:
        assert [r.endswith(f" from {old_package}") for r in _ran(scenario, replica)] == [True]
    workers = scenario.kubelet.running()
    assert len(workers) == 2
    ran = packages(scenario.records_dir)
    assert ran == dict.fromkeys(workers, str(old_package)), "the workers run the old release"

    started = time.time()
    with scenario.producing(every=0.1, count=4):
        time.sleep(2)
        # helm upgrade: the chart's CRD template changes with the operator's Deployment,
        # so the old replicas meet the new CRD (its new defaults) before they go.
        # 75ef96e's spec model refuses the new CRD's default leases.stuckShardSeconds: its
        # leader's reconcile fails from here on, and an old standby that wins the term
        # below cannot load the consumer at all — this test then fails (docs/upgrades.md).
        releases.apply_crd(control_plane, releases.CURRENT_CRD)
        time.sleep(3)
        # A RollingUpdate with maxSurge 1: a new pod, then an old one goes (the leader
        # first, the worst case: the term moves while old and new replicas both stand by).
        # The new replicas keep tables past 2 entries in a lease log: the table of the
        # previous release's layout moves into it on the new leader's first write.
        scenario.operator_env = LEASE_GROUPS_PAST_TWO
        for step in range(len(old_replicas)):
            _replace_one(scenario, old_replicas, f"operator-next-{step}")
        leader = scenario.leader()
        assert leader is not None
        assert leader.startswith("operator-next-"), leader
        assert [r.endswith(f" from {THIS_PACKAGE}") for r in _ran(scenario, leader)] == [True]
        led = time.time()
        time.sleep(4)  # records keep flowing through the new operator alone
    wait_for(scenario.all_processed, 60, "every record put")

    report = scenario.delivered(duplicates_at_most=0)
    assert head_of(scenario.stored_status()) is not None, "the table moved into a lease log"
    assert scenario.kubelet.running() == workers, "no worker pod replaced"
    assert scenario.kubelet.exits == {}, "no worker restarted"
    # Both old workers processed records after the new release took the lead, their
    # leases renewed and their checkpoints taken by it alone (the old replicas are gone).
    assert all(report.last_processed[w] > led for w in workers), report.last_processed
    assert packages(scenario.records_dir) == ran
    print(
        f"rolled 2 operator replicas {releases.previous_commit()[:7]} -> this checkout "
        f"under 2 workers of {releases.previous_commit()[:7]}: {report.unique} records, "
        f"0 lost, {report.duplicates} duplicates, longest pause "
        f"{report.longest_pause(started, led):.1f} s"
    )
