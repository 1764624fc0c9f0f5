"""Split and merge while consuming: children start only after their parents' last record."""

from __future__ import annotations

from testbed.kinesis import list_all_shards
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_split_and_merge_keep_parents_before_children(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=2)
    client = scenario.kinesis.client
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "records before resharding")
    first = scenario.split_and_merge(200)

    report = scenario.delivered()
    shards = list_all_shards(client, scenario.stream)
    assert len([s for s in shards if s.get("ParentShardId")]) == 3
    assert report.children_before_parents(shards) == []
    wait_for(
        lambda: {first[0], first[2], first[3]}.isdisjoint(scenario.status()["leases"]),
        30,
        "finished parents to leave the status once their children started",
    )
