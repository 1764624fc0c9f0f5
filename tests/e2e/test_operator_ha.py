"""Two operator replicas, one leader elected with a Lease, workers reaching the leader
through a stand-in for the chart's Service (which selects the leader's pod): the leader
killed under load, and a rolling upgrade. Nothing lost, nothing processed twice, no shard
moved: the workers ride through the switch."""

from __future__ import annotations

from testbed.handover import hand_over, start_with_two_operators
from testbed.operator_process import LEADER_LEASE_SECONDS
from testbed.scenario import Scenario


def test_the_standby_takes_over_when_the_leader_is_killed(scenario: Scenario) -> None:
    start_with_two_operators(scenario)
    handover = hand_over(scenario, "kill")
    assert handover.new_leader != handover.old_leader
    assert handover.new_leader in scenario.replicas
    scenario.delivered(duplicates_at_most=0)
    assert handover.owners_after == handover.owners_before, "no shard moved"
    # The standby may lead only once the killed leader's Lease has run out.
    assert handover.seconds >= LEADER_LEASE_SECONDS
    print(f"leader killed: every shard checkpointing again after {handover.seconds:.1f} s")


def test_a_rolling_upgrade_hands_over_at_once(scenario: Scenario) -> None:
    start_with_two_operators(scenario)
    handover = hand_over(scenario, "upgrade")
    assert handover.new_leader != handover.old_leader
    scenario.delivered(duplicates_at_most=0)
    assert handover.owners_after == handover.owners_before, "no shard moved"
    print(
        f"rolling upgrade: checkpointing again after {handover.seconds:.1f} s, "
        f"longest pause {handover.longest_pause:.1f} s"
    )
