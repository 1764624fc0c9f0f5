"""Scaling the workers moves shards by hand-off: balanced, nothing lost, no duplicates."""

from __future__ import annotations

from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_scale_up_hands_off_without_duplicates(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=1)
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "the first worker to process everything")
    assert list(scenario.owners().values()) == [4]

    scenario.scale(3)
    wait_for(lambda: sorted(scenario.owners().values()) == [1, 1, 2], 60, "2/1/1 balance")
    scenario.produce(200)
    wait_for(scenario.all_processed, 60, "all records after the scale-up")

    report = scenario.delivered()  # planned moves hand off: no record is processed twice
    assert len(report.by_worker) == 3
    reasons = {reason for reason, _ in scenario.events()}
    assert {"LeaseGranted", "HandOff"} <= reasons


def test_failing_processor_is_retried_and_skips_nothing(scenario: Scenario) -> None:
    scenario.start(shards=2, replicas=1, processor_env={"RECORD_FAIL_EVERY": "2"})
    for _ in range(6):
        scenario.produce(50)
    wait_for(scenario.all_processed, 90, "every record despite the failures")
    scenario.delivered()  # a failed attempt records nothing and is retried
    assert scenario.kubelet is not None
    pod_logs = "".join(p.read_text() for p in scenario.workdir.glob("pods/*/output.log"))
    assert "processor failed in process_records; retried after a back-off" in pod_logs
