"""Fixtures for the real parts: one control plane and one Kinesis emulator per test
session (per xdist worker), a fresh namespace and stream name per test."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from xdist.remote import Producer

from testbed.controlplane import ControlPlane
from testbed.dynamodb import DynamoDBLocal
from testbed.kinesis import KinesisEmulator
from testbed.operator_process import OperatorProcess
from testbed.processes import BRIEF_JVM_OPTIONS
from testbed.spark_cluster import SparkCluster
from testbed.suite import Counts, GroupedScheduling, Unfinished, start_rank

REPO = Path(__file__).resolve().parents[1]
CRD_PATH = REPO / "crds" / "streamconsumer.yaml"


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch (block managers, artifacts) in this run's temporary directory, not
    in /tmp: a JVM that ends without its shutdown hooks leaves its scratch behind. Worker
    processes the test kubelet starts inherit the same settings, and the brief JVM's options."""
    scratch = tmp_path_factory.mktemp("spark-scratch")
    options = " ".join((f"-Djava.io.tmpdir={scratch}", *BRIEF_JVM_OPTIONS))
    java = f'--driver-java-options "{options}" pyspark-shell'
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_LOCAL_DIRS", str(scratch))
        patch.setenv("PYSPARK_SUBMIT_ARGS", java)
        yield
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def delta_jars() -> Path:
    """The Delta jars a session without STREAMCONSUMER_SPARK_JARS uses, fetched once per
    machine before any worker needs them: on a fresh machine a failed fetch is this
    fixture's error, with Ivy's report, and the download is no part of a test's deadline."""
    from streamconsumer.spark import jars  # the Spark package, only for tests that ask

    return jars.cached()


@pytest.fixture(scope="session")
def spark_cluster(
    tmp_path_factory: pytest.TempPathFactory, delta_jars: Path
) -> Iterator[SparkCluster]:
    """A standalone Spark cluster (a master, two workers) and a Spark Connect server on it
    with Delta Lake, as a team would run beside its consumers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STREAMCONSUMER_SPARK_JARS", str(delta_jars))
        cluster = SparkCluster.start(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        config.pluginmanager.register(Unfinished(), "unfinished-tests")
        config.pluginmanager.register(Counts(), "test-counts")


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> GroupedScheduling | None:
    return GroupedScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


# A failing test that ran an operator shows the end of its log: a timeout under a loaded
# CI says nothing more about what the operator was doing.
LOG_TAIL_LINES = 80


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for fixture, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, OperatorProcess) and value.log_path.exists():
                lines = value.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                tail = "\n".join(line[:400] for line in lines)
                report.sections.append((f"the end of {fixture}'s log ({value.log_path})", tail))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
    items.sort(key=start_rank)  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(tmp_path_factory.mktemp("control-plane"))
    try:
        result = plane.kubectl("apply", "--server-side", "-f", str(CRD_PATH))
        assert result.returncode == 0, result.stderr
        # Polled rather than `kubectl wait`, which fails outright ("accessor error") when
        # it reads the CRD before the apiserver has given it any condition.
        deadline = time.monotonic() + 60
        established = '{.status.conditions[?(@.type=="Established")].status}'
        while (
            plane.kubectl("get", "-f", str(CRD_PATH), "-o", f"jsonpath={established}").stdout
            != "True"
        ):
            assert time.monotonic() < deadline, "the CRD never became Established"
            time.sleep(0.2)
        # Established is not the end: the new resource's storage may still be initializing.
        while plane.kubectl("get", "streamconsumers", "-A").returncode != 0:
            assert time.monotonic() < deadline, "StreamConsumer storage never became ready"
            time.sleep(0.2)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    # The kubernetes package types its API classes but not its config loaders.
    api: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig)
    )
    yield api
    api.close()  # type: ignore[no-untyped-call]


def _dns_label(text: str, limit: int) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:limit].rstrip("-")


@pytest.fixture
def namespace(api_client: k8s.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test, deleted afterwards."""
    name = f"{_dns_label(request.node.name, 50)}-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def kinesis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KinesisEmulator]:
    """The faithful emulator (kinesis-local)."""
    emulator = KinesisEmulator.start("kinesis-local", tmp_path_factory.mktemp("kinesis-local"))
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def kinesalite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KinesisEmulator]:
    """The fast emulator (kinesalite)."""
    emulator = KinesisEmulator.start("kinesalite", tmp_path_factory.mktemp("kinesalite"))
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def dynamodb_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DynamoDBLocal]:
    """DynamoDB Local (Java), reachable only through this machine's loopback."""
    local = DynamoDBLocal.start(tmp_path_factory.mktemp("dynamodb-local"))
    yield local
    local.stop()


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> str:
    return f"{_dns_label(request.node.name, 40)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def stream_name(request: pytest.FixtureRequest) -> str:
    return f"{_dns_label(request.node.name, 40)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built from its Go module when there is none on PATH (tests/helm/build.sh)."""
    out = subprocess.run(
        [str(REPO / "tests" / "helm" / "build.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def kstatus() -> Path:
    """kstatus' verdict on objects as JSON, built from Go modules (tests/kstatus/build.sh)."""
    out = subprocess.run(
        [str(REPO / "tests" / "kstatus" / "build.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])
