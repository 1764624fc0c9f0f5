"""An async processor on the real parts (issue 29): a real operator, real worker
processes loading it from its entrypoint, kinesis-local. Its calls run on each worker's
event loop thread; failed calls are retried; scaling up hands shards off: nothing lost,
order kept per shard, and no record processed twice."""

from __future__ import annotations

from streamconsumer.awaiting import LOOP_THREAD_NAME
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_an_async_processor_keeps_every_guarantee_through_retries_and_hand_offs(
    scenario: Scenario,
) -> None:
    scenario.start(
        shards=3,
        replicas=1,
        processor="testbed.async_recording:AsyncRecordingProcessor",
        processor_env={"RECORD_FAIL_EVERY": "3"},
        on_failure={"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.5},
    )
    scenario.produce(150)
    wait_for(scenario.all_processed, 90, "the first worker to process everything")

    scenario.scale(2)
    wait_for(lambda: sorted(scenario.owners().values()) == [1, 2], 60, "2/1 balance")
    scenario.produce(150)
    wait_for(scenario.all_processed, 90, "every record after the scale-up")

    report = scenario.delivered()  # planned moves hand off: no record is processed twice
    assert len(report.by_worker) == 2
    threads = {
        line for path in scenario.records_dir.glob("*.threads") for line in path.read_text().split()
    }
    assert threads == {LOOP_THREAD_NAME}, "every call awaited on the worker's event loop"
    pod_logs = "".join(p.read_text() for p in scenario.workdir.glob("pods/*/output.log"))
    assert "processor failed in process_records; retried after a back-off" in pod_logs
