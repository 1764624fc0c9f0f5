"""Scaling the workers moves shards by hand-off: balanced, nothing lost, no duplicates."""

from __future__ import annotations

from testbed.scenario import Scenario, wait_for


def test_scale_up_hands_off_without_duplicates(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=1)
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "the first worker to process everything")
    assert list(scenario.owners().values()) == [4]

    scenario.scale(3)
    wait_for(lambda: sorted(scenario.owners().values()) == [1, 1, 2], 60, "2/1/1 balance")
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "all records after the scale-up")

    report = scenario.report()
    assert report.lost == set()
    assert report.order_violations == []
    assert report.duplicates == 0, "planned moves hand off: no record is processed twice"
    assert len(report.by_worker) == 3
