"""One StreamConsumer running for real: a stream on the emulator, the operator process,
the local kubelet running worker pods, and the recording processor. Used by the
end-to-end tests and by `make demo`."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, Unpack

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.leases.lease_group_store import read_consumer
from streamconsumer.controller.names import label_selector
from streamconsumer.models import API_VERSION, KIND
from testbed.controlplane import ControlPlane
from testbed.kinesis import (
    KinesisEmulator,
    create_stream,
    list_all_shards,
    merge_shards,
    put_records,
    split_shard_in_half,
)
from testbed.kube import StreamConsumers
from testbed.kubelet import LocalKubelet
from testbed.operator_process import OperatorProcess
from testbed.proxy import CuttableProxy
from testbed.recording import Report, read_report
from testbed.waiting import wait_for

# The ReplicaSet removes the pods of the lowest deletion cost first (Kubernetes 1.22+).
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

TESTS_DIR = Path(__file__).resolve().parents[1]


def python_path(code: Path | None = None) -> str:
    """The tests, then the caller's PYTHONPATH; `code` first: another release's package."""
    parts = [str(code) if code else None, str(TESTS_DIR), os.environ.get("PYTHONPATH")]
    return os.pathsep.join(filter(None, parts))


class SpecOptions(TypedDict, total=False):
    """A scenario's StreamConsumer spec where a test wants other than the default."""

    processor: str  # entrypoint; testbed.recording:RecordingProcessor
    max_records: int  # 100
    processor_env: dict[str, str] | None
    autoscaling: dict[str, Any] | None
    initial_position: str  # TRIM_HORIZON
    on_failure: dict[str, Any] | None
    filter: dict[str, Any] | None  # processor.filter
    stuck_shard_seconds: float  # the spec's default (the stuck-shard watchdog)
    max_reads_per_second: float  # the spec's default (reading.maxReadsPerSecond)
    processes: int  # 1 (processor.processes)


class Scenario:
    def __init__(
        self,
        plane: ControlPlane,
        api_client: k8s.ApiClient,
        kinesis: KinesisEmulator | None,
        namespace: str,
        stream: str,
        workdir: Path,
        name: str = "clicks",
    ) -> None:
        self.plane = plane
        self.api_client = api_client
        self._kinesis = kinesis  # None: another source (a subclass says which)
        self.namespace = namespace
        self.stream = stream
        self.workdir = workdir
        self.name = name
        self.records_dir = workdir / "records"
        self.consumers = StreamConsumers(api_client, namespace)
        self.produced: set[str] = set()
        self._counter = itertools.count()
        self.operator: OperatorProcess | None = None
        self._operator_port: int | None = None
        # Several replicas: by identity, behind a stand-in for the chart's Service.
        self.replicas: dict[str, OperatorProcess] = {}
        self.service: CuttableProxy | None = None
        self.kubelet: LocalKubelet | None = None
        self.tls = False  # True: the operator serves HTTPS from its managed CA
        self.operator_env: dict[str, str] = {}  # settings of every operator process started
        self.also_watched: list[str] = []  # namespaces the operator watches beside this one

    @property
    def kinesis(self) -> KinesisEmulator:
        assert self._kinesis is not None, "not a Kinesis scenario"
        return self._kinesis

    def source(self) -> dict[str, Any]:
        """spec.source of the StreamConsumer."""
        return {
            "kinesis": {
                "streamName": self.stream,
                "region": "us-east-1",
                "endpointURL": self.kinesis.endpoint_url,
            }
        }

    def create_source(self, shards: int) -> None:
        create_stream(self.kinesis.client, self.stream, shards)

    def manifest(
        self, replicas: int, lease_seconds: float, delay: float, **options: Unpack[SpecOptions]
    ) -> dict[str, Any]:
        processor_env = options.get("processor_env") or {}
        on_failure = options.get("on_failure")
        autoscaling = options.get("autoscaling")
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": {
                "source": self.source(),
                "processor": {
                    "image": "local/recording:dev",
                    "entrypoint": options.get("processor", "testbed.recording:RecordingProcessor"),
                    "env": [
                        {"name": "RECORD_DIR", "value": str(self.records_dir)},
                        {"name": "RECORD_DELAY_SECONDS", "value": str(delay)},
                        # The emulator takes any credentials; real ones never go in a spec.
                        {"name": "AWS_ACCESS_KEY_ID", "value": "testing"},
                        {"name": "AWS_SECRET_ACCESS_KEY", "value": "testing"},
                        *({"name": k, "value": v} for k, v in processor_env.items()),
                    ],
                    **({"onFailure": on_failure} if on_failure else {}),
                    **({"filter": options["filter"]} if options.get("filter") else {}),
                    **({"processes": options["processes"]} if "processes" in options else {}),
                },
                "replicas": replicas,
                "initialPosition": options.get("initial_position", "TRIM_HORIZON"),
                **({"autoscaling": autoscaling} if autoscaling else {}),
                "leases": {
                    "durationSeconds": lease_seconds,
                    **(
                        {"stuckShardSeconds": options["stuck_shard_seconds"]}
                        if "stuck_shard_seconds" in options
                        else {}
                    ),
                },
                # The default pause after an empty read: kinesis-local spends about 10 ms of
                # CPU on each GetRecords, so a brisker poll of every idle shard costs the
                # suite's 2 cores more than it saves in waiting.
                "reading": {
                    "maxRecords": options.get("max_records", 100),
                    **(
                        {"maxReadsPerSecond": options["max_reads_per_second"]}
                        if "max_reads_per_second" in options
                        else {}
                    ),
                },
            },
        }

    def start(
        self,
        shards: int | None,
        replicas: int,
        lease_seconds: float = 6.0,
        delay: float = 0.0,
        pod_env: Callable[[str], dict[str, str]] | None = None,
        operators: int = 1,
        operator_code: Path | None = None,
        worker_code: Path | None = None,
        **options: Unpack[SpecOptions],
    ) -> Scenario:
        """`operator_code`, `worker_code`: a directory whose streamconsumer package the
        operators (then behind a Service, however many) or the workers run instead of
        this checkout's (another release's; testbed.releases)."""
        if shards is not None:  # None: the stream is there already
            self.create_source(shards)
        if operators == 1 and operator_code is None:
            self.start_operator()
        else:
            self.service = CuttableProxy(self._leader_port)
            for index in range(operators):
                self.add_operator(f"operator-{index}", code=operator_code)
        self.start_kubelet(pod_env, worker_code)
        self.consumers.create(self.manifest(replicas, lease_seconds, delay, **options))
        return self

    def start_kubelet(
        self,
        pod_env: Callable[[str], dict[str, str]] | None = None,
        worker_code: Path | None = None,
    ) -> None:
        """Runs this consumer's worker pods (another consumer's operator may serve them)."""
        self.kubelet = LocalKubelet(
            self.api_client,
            self.namespace,
            label_selector(self.name),
            self.workdir / "pods",
            # The caller's PYTHONPATH after the tests: a worktree's workers run its code,
            # not the checkout the virtualenv was installed from.
            extra_env={
                "PYTHONPATH": python_path(worker_code),
                "STREAMCONSUMER_LOG_LEVEL": "INFO",
            },
            pod_env=lambda pod: {
                # Worker pods share this host's ports: metrics only where a test asks.
                "STREAMCONSUMER_METRICS_PORT": "0",
                **(pod_env(pod) if pod_env else {}),
            },
        ).start()

    def start_operator(self) -> None:
        """Starts (or restarts) the operator; a restart keeps its address, as a Service would."""
        port = self._operator_port
        self.operator = OperatorProcess(
            self.plane.kubeconfig,
            self.namespace,
            self.workdir / "operator",
            port=port,
            tls=self.tls,
            env=self.operator_env,
            also_watched=self.also_watched,
        ).start()
        self._operator_port = self.operator.port

    def add_operator(self, identity: str, code: Path | None = None) -> OperatorProcess:
        """One more operator replica (a new pod of a rolling upgrade, say), running the
        package in `code` (None: this checkout's)."""
        assert self.service is not None, "start(operators=2 or more) first"
        env = {
            **self.operator_env,
            "STREAMCONSUMER_POD_NAME": identity,
            "STREAMCONSUMER_API_URL": self.service.url,
        }
        replica = OperatorProcess(
            self.plane.kubeconfig, self.namespace, self.workdir / identity, env=env, code=code
        ).start()
        self.replicas[identity] = replica
        return replica

    def leader(self) -> str | None:
        """Who holds the operators' Lease (None: nobody, or not yet created)."""
        name = OperatorConfig.model_fields["leader_lease_name"].default
        try:
            lease = k8s.CoordinationV1Api(self.api_client).read_namespaced_lease(
                name, self.namespace
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return lease.spec.holder_identity if lease.spec else None

    def _leader_port(self) -> int | None:
        replica = self.replicas.get(self.leader() or "")
        return replica.port if replica is not None and replica.server is not None else None

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        if self.operator is not None:
            self.operator.stop()
        for replica in self.replicas.values():
            replica.stop()
        if self.service is not None:
            self.service.close()

    # --- driving ------------------------------------------------------------------

    def produce(self, count: int) -> None:
        batch = [f"r-{next(self._counter)}" for _ in range(count)]
        put_records(self.kinesis.client, self.stream, [(value, value.encode()) for value in batch])
        self.produced.update(batch)

    @contextmanager
    def producing(self, every: float = 0.3, count: int = 10) -> Iterator[None]:
        """Puts `count` records every `every` seconds while the block runs."""
        stop = threading.Event()

        def produce() -> None:
            while not stop.wait(every):
                self.produce(count)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def checkpoints(self) -> dict[str, str | None]:
        """Each shard's checkpoint as the status holds it."""
        leases = self.status().get("leases", {})
        return {shard: lease.get("checkpoint") for shard, lease in leases.items()}

    def scale(self, replicas: int, going: Iterable[str] = ()) -> None:
        """Scales the workers to `replicas`; on a scale-down, the pods `going` are the
        ones removed. (Else the ReplicaSet ranks pods by readiness, restarts and age,
        which a loaded machine can turn: a pod's readiness probe late once.)"""
        core = k8s.CoreV1Api(self.api_client)
        for pod in going:
            core.patch_namespaced_pod(
                pod, self.namespace, {"metadata": {"annotations": {DELETION_COST: "-1000"}}}
            )
        self.consumers.patch_scale(self.name, replicas)

    def status(self) -> dict[str, Any]:
        """The status, its lease table inline wherever it is kept (lease groups)."""
        return dict(read_consumer(self.api_client, self.namespace, self.name).get("status") or {})

    def stored_status(self) -> dict[str, Any]:
        """The status as stored: a large table's leases in lease groups."""
        return dict(self.consumers.get(self.name).get("status") or {})

    def crash_worker(self, pod: str) -> float:
        """kill -9 of worker pod `pod`; when it was killed."""
        assert self.kubelet is not None, "start() first"
        self.kubelet.kill(pod, signal.SIGKILL)
        return time.time()

    def owners(self) -> Counter[str]:
        leases = self.status().get("leases", {})
        return Counter(
            lease["owner"] for lease in leases.values() if lease.get("state") == "Active"
        )

    def events(self) -> list[tuple[str, str]]:
        """(reason, message) of the Events posted about the StreamConsumer."""
        listed = k8s.CoreV1Api(self.api_client).list_namespaced_event(self.namespace)
        return [
            (event.reason or "", event.message or "")
            for event in listed.items
            if event.involved_object.kind == "StreamConsumer"
        ]

    def report(self) -> Report:
        return read_report(self.records_dir, self.produced)

    def delivered(self, duplicates_at_most: int | None = 0) -> Report:
        """The report, after checking the guarantees every test shares: nothing lost,
        per-shard order, and no more duplicates than allowed (None: any)."""
        report = self.report()
        assert report.lost == set(), f"{len(report.lost)} records lost"
        assert report.order_violations == []
        if duplicates_at_most is not None:
            assert report.duplicates <= duplicates_at_most, report.duplicates
        return report

    def split_and_merge(self, records: int) -> list[str]:
        """Splits the first shard and merges the third and fourth, `records` produced after
        each, and waits until every record is processed; the shards before, sorted."""
        client = self.kinesis.client
        first = sorted(s["ShardId"] for s in list_all_shards(client, self.stream))
        split_shard_in_half(client, self.stream, first[0])
        self.produce(records)
        merge_shards(client, self.stream, first[2], first[3])
        self.produce(records)
        wait_for(self.all_processed, 90, "records after the split and the merge")
        return first

    def all_processed(self) -> bool:
        return not self.report().lost


class FanOutScenario(Scenario):
    """The same, its workers reading through enhanced fan-out (SubscribeToShard)."""

    def source(self) -> dict[str, Any]:
        source = super().source()
        source["kinesis"]["consumer"] = "fanOut"
        return source
