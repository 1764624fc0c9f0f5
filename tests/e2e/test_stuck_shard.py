"""The stuck-shard watchdog on the real parts (issue 25, docs/failure-policy.md#stuck-shards):
a worker whose thread for one shard is wedged in `process_records` (far below the policy's
timeout, so the worker's own watchdog does not see it) is reported — Ready=False with
reason ShardStuck, a ShardStuck Event, `streamconsumer_stuck_shards` 1 — and its lease is
withdrawn: the wedged worker ends once its fence for the shard has closed, the shard is
granted again under a new epoch only after that, and every record is then processed."""

from __future__ import annotations

import time
from typing import Any

from e2e.test_metrics import scrape, total
from testbed.scenario import Scenario
from testbed.waiting import wait_for

LEASE = 6.0
STUCK = 8.0
EXIT_CALL_STUCK = 3  # worker/runtime.py
SEEN_LATE = 0.25  # the test kubelet notices an exit within 0.2 s


def condition(scenario: Scenario, kind: str) -> dict[str, Any]:
    conditions = scenario.status().get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def test_a_wedged_shard_is_reported_withdrawn_and_granted_again(scenario: Scenario) -> None:
    mark = scenario.workdir / "hung"
    scenario.start(
        shards=2,
        replicas=2,
        lease_seconds=LEASE,
        # The first batch holding r-25 sleeps an hour; calls may take that long.
        processor_env={
            "RECORD_HANG": "r-25",
            "RECORD_HANG_SECONDS": "3600",
            "RECORD_HANG_MARK": str(mark),
        },
        on_failure={"timeoutSeconds": 7200},
        stuck_shard_seconds=STUCK,
    )
    assert scenario.operator is not None
    metrics_url = scenario.operator.metrics_url
    ours = {"namespace": scenario.namespace, "consumer": scenario.name}
    scenario.produce(20)
    wait_for(lambda: len(scenario.report().by_shard) == 2, 60, "both shards processed")
    wait_for(lambda: len(scenario.owners()) == 2, 30, "one shard per worker")
    scenario.produce(20)  # r-25 wedges its shard's thread
    wait_for(mark.exists, 30, "the call on r-25 to begin")
    wedged = mark.read_text().split()[0]
    wedged_at = time.time()
    (shard,) = [s for s, lease in scenario.status()["leases"].items() if lease["owner"] == wedged]
    epoch = scenario.status()["leases"][shard]["epoch"]

    # Reported: the condition, the gauge, an Event.
    wait_for(
        lambda: condition(scenario, "Ready").get("reason") == "ShardStuck",
        STUCK + 40,
        "Ready=False, reason ShardStuck",
    )
    ready = condition(scenario, "Ready")
    assert ready["status"] == "False"
    assert f"{shard} stuck on {wedged} (epoch {epoch})" in ready["message"]
    assert condition(scenario, "Stalled")["reason"] == "ShardStuck"
    assert total(scrape(metrics_url), "streamconsumer_stuck_shards", **ours) == 1
    reported = time.time()
    assert reported - wedged_at >= STUCK, "not before records waited stuckShardSeconds"
    wait_for(
        lambda: any(r == "ShardStuck" and shard in m for r, m in scenario.events()),
        30,
        "a ShardStuck Event",
    )

    # Withdrawn: the wedged worker ends when its fence closes, before the shard moves on.
    kubelet = scenario.kubelet
    assert kubelet is not None
    wait_for(lambda: wedged in kubelet.exits, 3 * LEASE, "the wedged worker to end")
    status, ended_at = kubelet.exits[wedged]
    assert status == EXIT_CALL_STUCK
    wait_for(
        lambda: any(r == "StuckLeaseReleased" and shard in m for r, m in scenario.events()),
        3 * LEASE,
        "the withdrawn lease released",
    )
    # Granted again under a new epoch, and every record processed, none lost.
    wait_for(scenario.all_processed, 90, "every record, after the shard was granted again")
    lease = scenario.status()["leases"][shard]
    assert lease["epoch"] > epoch
    report = scenario.delivered(duplicates_at_most=0)  # the wedged batch recorded nothing
    assert report.order_violations == []
    taken_over = report.first_processed(shard, after=wedged_at, besides=wedged)
    assert taken_over is not None
    assert ended_at - SEEN_LATE <= taken_over, "the wedged call ended before the shard moved on"

    # Clear again once the shard moves; granted again once only (no loop of withdrawals).
    wait_for(lambda: condition(scenario, "Ready").get("status") == "True", 60, "Ready again")
    assert total(scrape(metrics_url), "streamconsumer_stuck_shards", **ours) == 0
    withdrawals = [m for r, m in scenario.events() if r == "StuckLeaseReleased"]
    assert len(withdrawals) == 1
