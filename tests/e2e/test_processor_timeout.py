"""Processor calls that do not return, on the real parts (issue 13.2). A thread cannot be
interrupted, so the worker process ends instead:
- a call past `onFailure.timeoutSeconds` is hung: Degraded names it, the worker's other
  shard is handed off (no duplicate), the worker exits 3 and its shard restarts from its
  checkpoint in a new pod;
- a call still running when its shard's fence closes (the worker is cut off from the
  operator) ends the worker at once, before the operator grants the shard to another."""

from __future__ import annotations

import time

from testbed.proxy import CuttableProxy
from testbed.scenario import Scenario
from testbed.waiting import wait_for

LEASE = 6.0
EXIT_CALL_STUCK = 3  # worker/runtime.py
SEEN_LATE = 0.25  # the test kubelet notices an exit within 0.2 s


def degraded(scenario: Scenario) -> str:
    conditions = scenario.status().get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Degraded"), "")


def hang_env(scenario: Scenario, value: str, seconds: float) -> dict[str, str]:
    return {
        "RECORD_HANG": value,
        "RECORD_HANG_SECONDS": str(seconds),
        "RECORD_HANG_MARK": str(scenario.workdir / "hung"),
    }


def test_a_hung_call_restarts_its_worker_after_handing_the_other_shard_off(
    scenario: Scenario,
) -> None:
    scenario.start(
        shards=2,
        replicas=1,
        lease_seconds=LEASE,
        processor_env=hang_env(scenario, "r-25", 3600),
        on_failure={"timeoutSeconds": 3},
    )
    scenario.produce(20)
    wait_for(lambda: len(scenario.report().by_shard) == 2, 60, "both shards processed")
    (first,) = scenario.owners()
    scenario.produce(20)  # r-25 hangs its shard's worker

    wait_for(lambda: "has not returned" in degraded(scenario), 60, "Degraded to name the call")
    assert "process_records has not returned after" in degraded(scenario)
    assert "timeoutSeconds 3" in degraded(scenario)
    kubelet = scenario.kubelet
    assert kubelet is not None
    wait_for(lambda: first in kubelet.exits, 60, "the hung worker to exit")
    assert kubelet.exits[first][0] == EXIT_CALL_STUCK
    wait_for(scenario.all_processed, 90, "every record, by the worker of a new pod")
    report = scenario.delivered(duplicates_at_most=0)  # the hung batch recorded nothing
    assert report.order_violations == []
    replacement = set(report.by_worker) - {first}
    assert replacement, "the new pod took both shards"
    wait_for(lambda: "has not returned" not in degraded(scenario), 60, "Degraded to clear")


def test_a_call_past_its_fence_ends_the_worker_before_another_takes_the_shard(
    scenario: Scenario,
) -> None:
    proxies: dict[str, CuttableProxy] = {}

    def through_proxy(pod: str) -> dict[str, str]:
        assert scenario.operator is not None
        proxies[pod] = CuttableProxy(scenario.operator.port)
        return {"STREAMCONSUMER_OPERATOR_URL": proxies[pod].url}

    # A 60 s call with a 300 s timeout: only the fence can stop it.
    scenario.start(
        shards=1,
        replicas=2,
        lease_seconds=LEASE,
        pod_env=through_proxy,
        processor_env=hang_env(scenario, "r-10", 60),
        on_failure={"timeoutSeconds": 300},
    )
    try:
        scenario.produce(10)
        wait_for(lambda: scenario.report().unique == 10, 60, "the first records")
        (victim,) = scenario.owners()
        scenario.produce(10)
        wait_for((scenario.workdir / "hung").exists, 30, "the call on r-10 to begin")
        proxies[victim].cut()
        cut_at = time.time()
        kubelet = scenario.kubelet
        assert kubelet is not None
        wait_for(lambda: victim in kubelet.exits, 3 * LEASE, "the cut-off worker to end")
        status, seen_at = kubelet.exits[victim]
        assert status == EXIT_CALL_STUCK
        assert seen_at <= cut_at + LEASE + SEEN_LATE, "within a lease of its last heartbeat"
        wait_for(scenario.all_processed, 60, "every record, by the other worker")
    finally:
        for proxy in proxies.values():
            proxy.close()
    report = scenario.delivered(duplicates_at_most=0)
    shard = next(iter(report.shard_owners))
    owners = report.shard_owners[shard]
    assert owners[0] == victim
    assert victim not in owners[1:]
    taken_over = report.first_processed(shard, after=cut_at, besides=victim)
    assert taken_over is not None
    assert seen_at - SEEN_LATE <= taken_over, "the call ended before the shard moved on"
