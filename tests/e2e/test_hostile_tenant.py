"""Two teams on one operator (issue 40). One namespace's editor writes a 600-byte kept
table whose finished shards read `shardId-000000000000..shardId-999999999999`, and a
StreamConsumer that resumes from it. Before, the operator built 10^12 ids on its event
loop and passed the chart's 512Mi in seconds, for every namespace, again after each
restart. Now that consumer alone is Stalled with a reason; the other team's records keep
flowing and its checkpoints moving, and the operator stays within its memory limit."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from streamconsumer.models.kept import KEPT_LABEL, TABLE_KEY
from testbed.kube import StreamConsumers
from testbed.scenario import Scenario
from testbed.waiting import wait_for

MEMORY_LIMIT_BYTES = 512 * 2**20  # the chart's resources.limits.memory
TRILLION = "shardId-000000000000..shardId-999999999999"


class MemoryLimit:
    """The kubelet's OOM kill, for a process of the test bed: its resident memory read
    every 50 ms, the process killed the moment it passes the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.peak = 0
        self.killed = False
        self.pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> MemoryLimit:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            pid = self.pid
            if pid is None:
                continue
            resident = _resident(pid)
            self.peak = max(self.peak, resident)
            if resident > self.limit and not self.killed:
                self.killed = True
                os.kill(pid, signal.SIGKILL)


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.fixture
def hostile(api_client: k8s.ApiClient) -> Iterator[str]:
    name = f"hostile-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def plant(scenario: Scenario, namespace: str) -> None:
    """The attack, as a namespace editor makes it: a kept table and a consumer of it."""
    table = {
        "format": 1,
        "namespace": namespace,
        "consumer": "evil",
        "source": scenario.source(),
        "created": "2026-11-01T00:00:00Z",
        "taken": "2026-11-27T00:00:00Z",
        "expires": "2099-01-01T00:00:00Z",
        "drained": True,
        "status": {"leases": {}, "finishedShards": [TRILLION]},
    }
    config_map = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="evil-checkpoints", labels={KEPT_LABEL: "evil"}),
        data={TABLE_KEY: json.dumps(table)},
    )
    assert len(json.dumps(table)) < 600
    k8s.CoreV1Api(scenario.api_client).create_namespaced_config_map(namespace, config_map)
    manifest = scenario.manifest(replicas=1, lease_seconds=6.0, delay=0.0)
    manifest["metadata"]["name"] = "evil"
    StreamConsumers(scenario.api_client, namespace).create(manifest)


def stalled_for(consumers: StreamConsumers, name: str) -> str | None:
    conditions = (consumers.get(name).get("status") or {}).get("conditions") or []
    stalled = {c["type"]: c for c in conditions}.get("Stalled") or {}
    return str(stalled.get("reason")) if stalled.get("status") == "True" else None


def warnings(scenario: Scenario, namespace: str) -> list[tuple[str, str]]:
    listed = k8s.CoreV1Api(scenario.api_client).list_namespaced_event(namespace)
    return [(e.reason or "", e.message or "") for e in listed.items if e.type == "Warning"]


def test_a_hostile_kept_table_stalls_its_own_consumer_and_no_other(
    scenario: Scenario, hostile: str
) -> None:
    scenario.also_watched = [hostile]
    with MemoryLimit(MEMORY_LIMIT_BYTES) as memory:
        scenario.start(shards=2, replicas=2)
        assert scenario.operator is not None
        memory.pid = scenario.operator.pid
        scenario.produce(40)
        wait_for(scenario.all_processed, 90, "the other team's records before the attack")
        before = scenario.checkpoints()

        plant(scenario, hostile)
        evil = StreamConsumers(scenario.api_client, hostile)
        for round_ in range(2):  # and again after a restart: no crash loop
            wait_for(lambda: stalled_for(evil, "evil") is not None, 60, "the hostile one stalled")
            scenario.produce(40)
            wait_for(scenario.all_processed, 90, f"the other team's records (round {round_})")
            assert not memory.killed, f"the operator passed {MEMORY_LIMIT_BYTES >> 20} MiB"
            if round_ == 0:
                scenario.operator.stop()
                scenario.start_operator()
                memory.pid = scenario.operator.pid

    assert stalled_for(evil, "evil") == "CheckpointsInvalid"

    def said() -> list[str]:
        return [m for r, m in warnings(scenario, hostile) if r == "CheckpointsInvalid"]

    wait_for(lambda: bool(said()), 30, "a Warning Event of the hostile one's reason")
    assert "100,000 shards" in said()[0]
    # Records are processed before their checkpoints are written (at most a status
    # interval later, and a restarted operator writes once its term is fenced).
    wait_for(lambda: scenario.checkpoints() != before, 30, "the other team's checkpoints moved")
    scenario.delivered(duplicates_at_most=0)
    assert memory.peak < MEMORY_LIMIT_BYTES, memory.peak
    assert "Traceback" not in scenario.operator.log_path.read_text()
