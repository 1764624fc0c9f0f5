"""A worker cut off from the operator fences itself within its lease; its shards move on
to a live worker only after that, so the two never process a shard at the same time."""

from __future__ import annotations

import threading
import time

from testbed.proxy import CuttableProxy
from testbed.scenario import Scenario
from testbed.waiting import wait_for

LEASE = 6.0


def test_cut_off_worker_stops_and_its_shards_move_on(scenario: Scenario) -> None:
    proxies: dict[str, CuttableProxy] = {}

    def through_proxy(pod: str) -> dict[str, str]:
        assert scenario.operator is not None
        proxies[pod] = CuttableProxy(scenario.operator.port)
        return {"STREAMCONSUMER_OPERATOR_URL": proxies[pod].url}

    scenario.start(shards=4, replicas=2, lease_seconds=LEASE, pod_env=through_proxy)
    stop_producing = threading.Event()

    def produce() -> None:
        while not stop_producing.wait(0.3):
            scenario.produce(10)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")
        producer.start()
        time.sleep(2)
        victim = sorted(scenario.owners())[0]
        victim_shards = {
            s for s, lease in scenario.status()["leases"].items() if lease.get("owner") == victim
        }
        proxies[victim].cut()
        cut_at = time.time()
        wait_for(
            lambda: victim not in scenario.owners() and sum(scenario.owners().values()) == 4,
            60,
            "the cut-off worker's shards to move on",
        )
        time.sleep(2)
    finally:
        stop_producing.set()
        producer.join()
        for proxy in proxies.values():
            proxy.close()
    wait_for(scenario.all_processed, 60, "every record produced")

    report = scenario.delivered(duplicates_at_most=None)
    # Self-fencing: nothing delivered later than a lease after the cut (its last
    # successful heartbeat was sent before the cut).
    assert report.last_processed[victim] <= cut_at + LEASE
    for shard in victim_shards:
        owners = report.shard_owners[shard]
        assert owners[0] == victim
        assert victim not in owners[1:], f"{shard} went back to the cut-off worker"
