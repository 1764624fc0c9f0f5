"""What the status costs beside the lease table (issue 41): every status write rewrites
the whole StreamConsumer in etcd, so what it lists besides the table stays small however
many workers there are (controller/leases/render.py::listed_workers)."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Collection

import pytest

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.render import MAX_LISTED_WORKERS, Generations, render
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.core.leases import ACTIVE, ShardLease
from streamconsumer.core.lineage import Shard
from testbed.specs import consumer_spec


def status_of(workers: int, shards: int, draining: Collection[str] = ()) -> dict[str, object]:
    names = [f"orders-consumer-workers-7d9f8b6c5d-{n:05x}" for n in range(workers)]
    leases = {
        f"shardId-{n:012d}": ShardLease(f"shardId-{n:012d}", names[n % workers], 3, str(n), ACTIVE)
        for n in range(shards)
    }
    coordinator = LeaseCoordinator(
        consumer_spec(),
        DurableState(leases=leases, promised_lease_seconds=20.0),
        time.monotonic(),
        created=datetime.datetime.now(datetime.UTC),
    )
    coordinator.set_shards([Shard(shard_id) for shard_id in leases])
    for name in draining:
        coordinator.workers[name].draining = True
    snapshot = coordinator.snapshot(time.monotonic())
    return render("c", coordinator, snapshot, Generations(1, 1), [], []).wire()


@pytest.mark.parametrize("workers", [1, MAX_LISTED_WORKERS])
def test_up_to_the_bound_every_worker_is_listed_with_its_shards(workers: int) -> None:
    listed = status_of(workers, 2 * workers)["workers"]
    assert isinstance(listed, dict)
    assert len(listed) == workers
    assert {summary["shards"] for summary in listed.values()} == {2}


def test_past_the_bound_only_draining_workers_are_listed_and_the_rest_is_small() -> None:
    draining = "orders-consumer-workers-7d9f8b6c5d-00007"
    status = status_of(500, 10_000, {draining})
    assert status["workers"] == {draining: {"shards": 20, "draining": True}}
    assert status["replicas"] == 499
    beside_the_table = {key: value for key, value in status.items() if key != "leases"}
    assert len(json.dumps(beside_the_table)) < 4096, beside_the_table
