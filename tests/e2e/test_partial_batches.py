"""Partial batch responses on the real parts (issue 29): a real operator, real worker
processes and kinesis-local. The processor reports the second half of every other
batch failed, once: every record is processed, in order per shard, none twice, none
lost — the halves done are never delivered again, the failed halves always are."""

from __future__ import annotations

from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_records_reported_failed_are_processed_again_and_nothing_else(
    scenario: Scenario,
) -> None:
    policy = {"retries": 2, "initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.5}
    scenario.start(
        shards=2, replicas=2, processor_env={"RECORD_PARTIAL_EVERY": "2"}, on_failure=policy
    )
    # Several puts, so that each shard reads batches of more than one record.
    for _ in range(6):
        scenario.produce(40)
    wait_for(lambda: not scenario.report().lost, 90, "every record processed")

    reports = [
        line
        for path in scenario.records_dir.glob("*.partial")
        for line in path.read_text().splitlines()
    ]
    assert reports, "the processor reported failed records"
    report = scenario.report()
    assert report.duplicates == 0, "records done before the first failed one ran once"
    assert report.order_violations == []
    assert report.lost == set()
