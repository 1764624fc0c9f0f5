"""10,000 shards per StreamConsumer (issue 29): the lease table of 10,000 shards held by
500 workers, written to a real apiserver the way the operator writes it (the production
LeaseCoordinator, `render`, StatusWriter and GroupedStatusApi over KubeStatusApi and
KubeLeaseGroups, in its default layout: a lease log), at 1 checkpoint per shard per
10 s: 1,000 checkpoints between two status writes. What the writes cost etcd itself is
bench/etcd_cost.py's. The figures: the largest object written, the requests and bytes a write
costs, and the operator's CPU per write (one write a second: the cores it keeps busy).
The baseline, from the same table: the status that held the table inline (refused by
etcd past about 1.5 MiB)."""

from __future__ import annotations

import contextlib
import datetime
import json
import random
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s

from bench.results import record
from bench.scratch import scratch_plane, with_the_crd
from bench.system import namespace
from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.lease_group_store import KubeLeaseGroups
from streamconsumer.controller.leases.lease_groups import (
    GroupedStatusApi,
    Layout,
    StoredGroup,
    Writer,
)
from streamconsumer.controller.leases.render import Generations, render
from streamconsumer.controller.leases.state import DurableState, durable_from_status
from streamconsumer.controller.leases.status import StatusInvalid, StatusUnavailable, StatusWriter
from streamconsumer.core.leases import ACTIVE, ShardLease
from streamconsumer.core.lineage import Shard
from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL, VERSION
from streamconsumer.models.api import CheckpointRequest
from testbed.specs import consumer_spec

SHARDS = 10_000
WORKERS = 500
CHECKPOINTS_PER_WRITE = 1_000  # 1 per shard per 10 s, one status write a second
WRITES = 20
NAME = "wide"


@dataclass
class Counted:
    """What the writes sent: requests by kind, and the size of each object written."""

    requests: dict[str, int] = field(default_factory=dict)
    largest: int = 0
    written: int = 0

    def saw(self, kind: str, size: int) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.largest = max(self.largest, size)
        self.written += size


class CountedStatus:
    def __init__(self, api: KubeStatusApi, counted: Counted) -> None:
        self._api, self._counted = api, counted

    def get(self) -> dict[str, Any]:
        return self._api.get()

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self._counted.saw("status", len(json.dumps(body)))
        return self._api.replace_status(body)


class CountedGroups:
    def __init__(self, store: KubeLeaseGroups, counted: Counted) -> None:
        self._store, self._counted = store, counted

    def create(self, name: str, content: str, written_by: Writer) -> None:
        self._counted.saw("create", len(content) + 400)  # the ConfigMap's metadata besides
        self._store.create(name, content, written_by)

    def read(self, name: str) -> str | None:
        return self._store.read(name)

    def contents(self, names: Collection[str]) -> dict[str, str]:
        return self._store.contents(names)

    def delete(self, name: str) -> None:
        self._counted.requests["delete"] = self._counted.requests.get("delete", 0) + 1
        self._store.delete(name)

    def listed(self) -> list[StoredGroup]:
        self._counted.requests["list"] = self._counted.requests.get("list", 0) + 1
        return self._store.listed()


def sequence(rng: random.Random) -> str:
    return str(rng.randrange(10**55, 10**56))  # Kinesis' 56 digits


def table(rng: random.Random, shards: int = SHARDS) -> tuple[DurableState, list[str]]:
    """`shards` shards, each held by one of 500 workers named as a Deployment's pods are."""
    workers = [
        f"orders-consumer-workers-7d9f8b6c5d-{rng.randrange(36**5):05x}" for _ in range(WORKERS)
    ]
    leases = {
        f"shardId-{n:012d}": ShardLease(
            f"shardId-{n:012d}", workers[n % WORKERS], 3, sequence(rng), ACTIVE
        )
        for n in range(shards)
    }
    return DurableState(leases=leases, promised_lease_seconds=20.0), workers


def wide_consumer(
    api: k8s.ApiClient, ns: str, rng: random.Random, shards: int = SHARDS
) -> tuple[dict[str, Any], LeaseCoordinator]:
    """A StreamConsumer created on the apiserver, and a coordinator of its `shards`
    shards' table (`table`), as an operator has once it loaded it."""
    spec = consumer_spec()
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": ns},
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    created = cast(
        dict[str, Any],
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body),
    )
    durable, _ = table(rng, shards)
    now = time.monotonic()
    coordinator = LeaseCoordinator(spec, durable, now, created=datetime.datetime.now(datetime.UTC))
    coordinator.set_shards([Shard(shard_id) for shard_id in durable.leases])
    return created, coordinator


def measure(api: k8s.ApiClient, ns: str) -> dict[str, Any]:
    rng = random.Random(29)
    created, coordinator = wide_consumer(api, ns, rng)
    counted = Counted()
    status_api = KubeStatusApi(api, ns, NAME, timeout=60)
    groups = KubeLeaseGroups(api, ns, NAME, created["metadata"]["uid"], timeout=60)
    counted_status = CountedStatus(status_api, counted)
    grouped = GroupedStatusApi(  # as the operator makes it (controller/consumer/consumers.py)
        counted_status,
        CountedGroups(groups, counted),
        NAME,
    )
    writer = StatusWriter(grouped, ns, NAME, holder="bench")

    def status() -> dict[str, Any]:
        snapshot = coordinator.snapshot(time.monotonic())
        return render(NAME, coordinator, snapshot, Generations(1, 1), [], []).wire()

    inline = len(json.dumps(status()))
    try:  # what an operator of the previous layout would meet
        status_api.replace_status({**created, "status": status()})
        refused = "accepted"
    except (StatusInvalid, StatusUnavailable) as error:
        refused = f"refused: {error}"[:160]
    writer.adopt(grouped.get())
    writer.write(status())  # the first write: every group
    first = Counted(dict(counted.requests), counted.largest, counted.written)
    counted.requests.clear()
    counted.written = 0
    cpu = wall = 0.0
    shard_ids = list(coordinator.leases)
    for _ in range(WRITES):
        for shard_id in rng.sample(shard_ids, CHECKPOINTS_PER_WRITE):
            lease = coordinator.leases[shard_id]
            assert lease.owner is not None
            coordinator.checkpoint(
                CheckpointRequest(
                    worker=lease.owner,
                    shard_id=shard_id,
                    epoch=lease.epoch,
                    sequence_number=str(int(lease.checkpoint or 0) + rng.randrange(1, 10**20)),
                )
            )
        started, started_cpu = time.monotonic(), time.process_time()
        writer.write(status())
        cpu += time.process_time() - started_cpu
        wall += time.monotonic() - started
    read_back = durable_from_status(grouped.get()["status"])
    assert read_back.leases == coordinator.leases, "the table read back is the one written"
    requests = sum(counted.requests.values())
    return {
        "inline_status_kib": inline / 1024,
        "inline_refused": refused,
        "largest_object_kib": max(counted.largest, first.largest) / 1024,
        "first_write_requests": sum(first.requests.values()),
        "requests_per_write": requests / WRITES,
        "groups_per_write": counted.requests.get("create", 0) / WRITES,
        "kib_per_write": counted.written / 1024 / WRITES,
        "operator_cpu_per_write": cpu / WRITES,
        "seconds_per_write": wall / WRITES,
    }


def main() -> None:
    with contextlib.ExitStack() as cleanup:
        _, plane = cleanup.enter_context(scratch_plane("streamconsumer-bench-groups-"))
        api = with_the_crd(plane)
        print(
            f"lease groups: {SHARDS} shards x {WORKERS} workers, {CHECKPOINTS_PER_WRITE} "
            f"checkpoints between writes (1 per shard per 10 s), {WRITES} writes, "
            f"{Layout().groups} groups, a local apiserver:"
        )
        m = measure(api, namespace(api, "bench-lease-groups"))
        print(f"  previous layout: status {m['inline_status_kib']:8.1f} KiB, {m['inline_refused']}")
        print(f"  largest object written     {m['largest_object_kib']:8.1f} KiB")
        print(f"  first write                {m['first_write_requests']:8.0f} requests")
        print(
            f"  a write                    {m['requests_per_write']:8.1f} requests "
            f"({m['groups_per_write']:.1f} groups), {m['kib_per_write']:.0f} KiB, "
            f"{m['seconds_per_write']:.2f} s"
        )
        print(
            f"  operator CPU               {m['operator_cpu_per_write']:8.2f} s a write: "
            f"{m['operator_cpu_per_write']:.2f} cores at one write a second"
        )
        print(
            f"  largest object / inline status: "
            f"{m['largest_object_kib'] / m['inline_status_kib']:.3f}"
        )
        record(
            {
                "largest_object_kib_10k_shards": round(m["largest_object_kib"], 1),
                "inline_status_kib_10k_shards": round(m["inline_status_kib"], 1),
                "lease_group_requests_per_write_10k_shards": round(m["requests_per_write"], 1),
                "status_writes_per_second_10k_shards": 1.0,
                "operator_cores_10k_shards": round(m["operator_cpu_per_write"], 2),
            }
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
