"""The processor's own log lines reach the worker's output (issue 27): under the worker's
WARNING, a processor's logger.info disappeared. Real operator, real worker process."""

from __future__ import annotations

from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_a_processors_info_lines_show_in_the_workers_output(scenario: Scenario) -> None:
    scenario.start(shards=1, replicas=1)
    scenario.produce(5)
    wait_for(scenario.all_processed, 60, "the records")
    outputs = "".join(
        path.read_text(errors="replace") for path in (scenario.workdir / "pods").rglob("output.log")
    )
    assert "logger=testbed.recording recording shardId-000000000000" in outputs
    assert "level=INFO logger=botocore" not in outputs, "the SDK stays quiet"
