"""The two sides behind one interface: start N workers, add one, kill one, stop; the PIDs
of the workers (whose process trees are measured) and of their checkpoint store."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Protocol

from kubernetes import client as k8s

from bench.peers.kcl import DynamoDBLocal, KclWorker
from bench.peers.tally import OUT_ENV, WORKER_ENV
from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator
from testbed.scenario import Scenario, SpecOptions

ROOT = Path(__file__).resolve().parents[2]


class Side(Protocol):
    name: str
    out: Path

    def start(self, workers: int) -> None: ...
    def add(self) -> str: ...
    def workers(self) -> list[str]: ...
    def roots(self) -> list[int]: ...
    def store_roots(self) -> list[int]: ...
    def kill(self, worker: str) -> None: ...
    def stop(self) -> None: ...
    def followers(self) -> set[str]: ...


class KclSide:
    name = "kcl"

    def __init__(
        self,
        kinesis: KinesisEmulator,
        dynamodb: DynamoDBLocal,
        stream: str,
        application: str,
        workdir: Path,
        settings: dict[str, str],
    ) -> None:
        self.kinesis, self.dynamodb = kinesis, dynamodb
        self.stream, self.application = stream, application
        self.workdir, self.settings = workdir, settings
        self.out = workdir / "tally"
        self._workers: dict[str, KclWorker] = {}

    def start(self, workers: int) -> None:
        for _ in range(workers):
            self.add()

    def add(self) -> str:
        name = f"kcl-{len(self._workers) + 1}"
        self._workers[name] = KclWorker(
            name,
            self.workdir / name,
            stream=self.stream,
            application=self.application,
            kinesis_url=self.kinesis.endpoint_url,
            dynamodb_url=self.dynamodb.endpoint_url,
            settings=self.settings,
            env={OUT_ENV: str(self.out), WORKER_ENV: name},
        )
        return name

    def workers(self) -> list[str]:
        return sorted(n for n, w in self._workers.items() if w.alive())

    def roots(self) -> list[int]:
        return [w.pid for w in self._workers.values() if w.alive()]

    def store_roots(self) -> list[int]:
        return [self.dynamodb.server.pid]

    def followers(self) -> set[str]:
        """Workers that said they are not KCL 3's leader (the one that assigns leases; its
        DynamoDB lock lasts 2 minutes, so killing it stalls reassignment that long)."""
        found = set()
        for name, worker in self._workers.items():
            lines = worker.server.log_path.read_text(errors="replace").splitlines()
            said = [line for line in lines if f"Current worker {name} is " in line]
            if said and "is not a leader" in said[-1]:
                found.add(name)
        return found

    def kill(self, worker: str) -> None:
        # The JVM and its Python children (its process group): a crashed host or
        # container takes all of them.
        os.killpg(self._workers[worker].pid, signal.SIGKILL)

    def stop(self) -> None:
        for worker in self._workers.values():
            worker.stop()


class OursSide:
    name = "ours"

    def __init__(
        self,
        plane: ControlPlane,
        api: k8s.ApiClient,
        kinesis: KinesisEmulator,
        stream: str,
        namespace: str,
        workdir: Path,
        lease_seconds: float,
        max_records: int,
        max_reads_per_second: float | None = None,
    ) -> None:
        k8s.CoreV1Api(api).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        )
        self.scenario = Scenario(plane, api, kinesis, namespace, stream, workdir)
        self.out = workdir / "tally"
        self.lease_seconds, self.max_records = lease_seconds, max_records
        self.max_reads_per_second = max_reads_per_second  # None: the spec's default
        self._replicas = 0

    def start(self, workers: int) -> None:
        self._replicas = workers
        options: SpecOptions = {
            "processor": "bench.peers.ours_app:PeersProcessor",
            "max_records": self.max_records,
        }
        if self.max_reads_per_second is not None:
            options["max_reads_per_second"] = self.max_reads_per_second
        self.scenario.start(
            shards=None,
            replicas=workers,
            lease_seconds=self.lease_seconds,
            pod_env=lambda pod: {
                "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}",
                OUT_ENV: str(self.out),
            },
            **options,
        )

    def add(self) -> str:
        before = set(self.workers())
        self._replicas += 1
        self.scenario.scale(self._replicas)
        return f"(a pod besides {sorted(before)})"

    def workers(self) -> list[str]:
        return self.scenario.kubelet.running() if self.scenario.kubelet else []

    def roots(self) -> list[int]:
        kubelet = self.scenario.kubelet
        if kubelet is None:
            return []
        return [kubelet.pods[n].process.pid for n in kubelet.running() if n in kubelet.pods]

    def store_roots(self) -> list[int]:
        operator = self.scenario.operator
        return [operator.server.pid] if operator and operator.server else []

    def followers(self) -> set[str]:
        return set(self.workers())  # the operator assigns; no worker leads

    def kill(self, worker: str) -> None:
        assert self.scenario.kubelet is not None
        self.scenario.kubelet.kill(worker, signal.SIGKILL)

    def stop(self) -> None:
        self.scenario.stop()
