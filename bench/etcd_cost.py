"""What a lease table's writes cost the cluster's etcd (issue 41), from etcd's own
metrics on a real etcd + kube-apiserver: WAL bytes and db growth a write, requests a
write, and the bytes a cluster-wide ConfigMap watcher (Argo CD, Kyverno, any cache of
ConfigMaps) receives a write. Each beside the floor measured in the same run: the bytes
of the shard ids and sequence numbers the write changed. The writes are the operator's
(the production LeaseCoordinator, `render`, StatusWriter, GroupedStatusApi over
KubeStatusApi and KubeLeaseGroups); each case runs with the lease log and, as the
baseline, with the layout before it (lease groups, or the table inline)."""

from __future__ import annotations

import contextlib
import random
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench.lease_groups import NAME, Counted, CountedGroups, CountedStatus, wide_consumer
from bench.results import record
from bench.scratch import scratch_plane, with_the_crd
from bench.system import namespace
from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.lease_group_store import KubeLeaseGroups
from streamconsumer.controller.leases.lease_groups import GroupedStatusApi, Layout
from streamconsumer.controller.leases.render import Generations, render
from streamconsumer.controller.leases.status import StatusWriter
from streamconsumer.models.api import CheckpointRequest
from testbed.controlplane import ControlPlane

WRITES = 30
"""Writes measured of a layout that does not fold; a lease log's are measured from a fold
(its first write is one) to the next, inclusive: what its writes cost, folds paid."""
MOST_WRITES = 400


@dataclass(frozen=True)
class Case:
    key: str  # of bench/results.json
    shards: int
    checkpoints: int  # changed between two writes
    layout: Layout


CASES = [
    Case("10k_shards", 10_000, 1_000, Layout()),
    Case("10k_shards_groups", 10_000, 1_000, Layout(log=False)),
    Case("10k_shards_100_checkpoints", 10_000, 100, Layout()),
    Case("10k_shards_100_checkpoints_groups", 10_000, 100, Layout(log=False)),
    Case("1k_shards", 1_000, 1_000, Layout()),
    Case("1k_shards_inline", 1_000, 1_000, Layout(inline_max_shards=1_000, log=False)),
]


def etcd_metric(plane: ControlPlane, name: str) -> float:
    with urllib.request.urlopen(f"{plane.etcd_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"etcd serves no {name}"
    return float(match.group(1))


class ConfigMapWatcher:
    """A cluster-wide watch of ConfigMaps, as a controller that caches them holds one:
    the bytes and events it receives."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.bytes = self.events = 0
        self._api = api
        core = k8s.CoreV1Api(api)
        listed = core.list_config_map_for_all_namespaces(limit=1)
        assert listed.metadata is not None
        self._response: Any = core.list_config_map_for_all_namespaces(  # urllib3's, raw
            watch=True,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=3600,
            _preload_content=False,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # closed at the end
            for chunk in self._response.stream(65536):
                self.bytes += len(chunk)
                self.events += chunk.count(b"\n")

    def stop(self) -> tuple[int, int]:
        """What it received so far; it reads on until the apiserver stops (a close
        would wait for its thread's read)."""
        return self.bytes, self.events


class LastWritten(CountedStatus):
    """Whether the last status written committed a fold: a lease log's head entry
    counts the segments since its base."""

    def __init__(self, api: KubeStatusApi, counted: Counted) -> None:
        super().__init__(api, counted)
        self.epoch: int | None = None

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        entries = list((body["status"].get("leases") or {}).values())
        logged = len(entries) == 1 and entries[0].get("state") == "InLeaseLog"
        self.epoch = entries[0]["epoch"] if logged else None
        return super().replace_status(body)

    def folded(self) -> bool:
        return self.epoch == 0


def measure(plane: ControlPlane, api: k8s.ApiClient, case: Case) -> dict[str, float]:
    ns = namespace(api, f"bench-etcd-{case.key.replace('_', '-')}")
    rng = random.Random(41)
    created, coordinator = wide_consumer(api, ns, rng, case.shards)
    counted = Counted()
    status_api = LastWritten(KubeStatusApi(api, ns, NAME, timeout=60), counted)
    grouped = GroupedStatusApi(
        status_api,
        CountedGroups(
            KubeLeaseGroups(api, ns, NAME, created["metadata"]["uid"], timeout=60), counted
        ),
        NAME,
        case.layout,
    )
    writer = StatusWriter(grouped, ns, NAME, holder="bench")

    def write() -> None:
        snapshot = coordinator.snapshot(time.monotonic())
        writer.write(render(NAME, coordinator, snapshot, Generations(1, 1), [], []).wire())

    writer.adopt(grouped.get())
    write()  # the first write: the whole table, whatever the layout
    counted.requests.clear()
    watcher = ConfigMapWatcher(api)
    time.sleep(0.5)
    wal = etcd_metric(plane, "etcd_disk_wal_write_bytes_total")
    db = etcd_metric(plane, "etcd_mvcc_db_total_size_in_bytes")
    floor = writes = 0
    shard_ids = list(coordinator.leases)
    while writes < (MOST_WRITES if case.layout.log else WRITES):
        writes += 1
        for shard_id in rng.sample(shard_ids, case.checkpoints):
            lease = coordinator.leases[shard_id]
            assert lease.owner is not None
            moved = str(int(lease.checkpoint or 0) + rng.randrange(1, 10**20))
            floor += len(shard_id) + len(moved)
            coordinator.checkpoint(
                CheckpointRequest(
                    worker=lease.owner,
                    shard_id=shard_id,
                    epoch=lease.epoch,
                    sequence_number=moved,
                )
            )
        write()
        if status_api.folded():
            break
    assert not case.layout.log or status_api.folded(), f"no fold in {writes} writes"
    time.sleep(1.0)  # the watch's last events
    wal = etcd_metric(plane, "etcd_disk_wal_write_bytes_total") - wal
    db = etcd_metric(plane, "etcd_mvcc_db_total_size_in_bytes") - db
    watched, events = watcher.stop()
    return {
        "writes": writes,
        "floor": floor / writes,
        "wal": wal / writes,
        "db": db / writes,
        "requests": sum(counted.requests.values()) / writes,
        "watch": watched / writes,
        "watch_events": events / writes,
    }


@contextlib.contextmanager
def plane_with_the_crd() -> Iterator[tuple[ControlPlane, k8s.ApiClient]]:
    with scratch_plane("streamconsumer-bench-etcd-") as (_, plane):
        yield plane, with_the_crd(plane)


def main() -> None:
    with plane_with_the_crd() as (plane, api):
        print("etcd cost of a lease table's writes, a real etcd (figures a write):")
        print(
            f"  {'case':36} {'writes':>6} {'floor':>8} {'WAL':>9} {'x floor':>8} {'db':>9} "
            f"{'requests':>8} {'CM watch':>9} {'x floor':>8}"
        )
        for case in CASES:
            figures: dict[str, float] = {}
            m = measure(plane, api, case)
            amplification = m["wal"] / m["floor"]
            watched = m["watch"] / m["floor"]
            print(
                f"  {case.key:36} {m['writes']:6.0f} {m['floor'] / 1024:7.1f}K "
                f"{m['wal'] / 1024:8.1f}K "
                f"{amplification:8.2f} {m['db'] / 1024:8.1f}K {m['requests']:8.1f} "
                f"{m['watch'] / 1024:8.1f}K {watched:8.2f}"
            )
            figures[f"etcd_amplification_{case.key}"] = round(amplification, 2)
            figures[f"etcd_wal_kib_per_write_{case.key}"] = round(m["wal"] / 1024, 1)
            figures[f"etcd_db_growth_kib_per_write_{case.key}"] = round(m["db"] / 1024, 1)
            figures[f"requests_per_write_{case.key}"] = round(m["requests"], 1)
            figures[f"configmap_watch_bytes_per_write_{case.key}"] = round(m["watch"])
            figures[f"configmap_watch_per_floor_{case.key}"] = round(watched, 2)
            record(figures)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
