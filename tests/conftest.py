"""Fixtures for the real parts: one control plane and one Kinesis emulator per test
session (per xdist worker), a fresh namespace and stream name per test."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from testbed.controlplane import ControlPlane
from testbed.dynamodb import DynamoDBLocal
from testbed.kinesis import KinesisEmulator

REPO = Path(__file__).resolve().parents[1]
CRD_PATH = REPO / "crds" / "streamconsumer.yaml"


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch (block managers, artifacts) in this run's temporary directory, not
    in /tmp: a JVM that ends without its shutdown hooks leaves its scratch behind. Worker
    processes the test kubelet starts inherit the same settings."""
    scratch = tmp_path_factory.mktemp("spark-scratch")
    java = f"--driver-java-options -Djava.io.tmpdir={scratch} pyspark-shell"
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


# `make test` spreads the tests over xdist workers. A test named here runs on the worker
# that runs the rest of its group: the real node is one per machine; Spark (a JVM per mode,
# or in worker processes) would starve a neighbour's leases if two ran at once; an
# integration file's module-scoped fixtures (control planes of other versions, emulators)
# would start again on every worker that took one of its tests. Every other test is a
# group of its own. The groups are read from the test's path by the scheduler below, not
# from `xdist_group` marks: pytest 9 no longer lets xdist fold a mark into the test's id,
# and `--dist loadgroup` then spreads every group silently (pytest-xdist#1386).
_GROUP_OF_FOLDER = {"realnode": "realnode", "spark": "spark"}
_GROUP_OF_FILE = {"test_cdc.py": "spark", "test_spark_pods.py": "spark"}
_GROUPED_BY_FILE = {"integration"}


def xdist_group(nodeid: str) -> str:
    """The group of the test with this id (`tests/<folder>/.../<file>.py::<name>`)."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    folder = path.parts[1] if len(path.parts) > 2 else ""
    if folder in _GROUP_OF_FOLDER:
        return _GROUP_OF_FOLDER[folder]
    if path.name in _GROUP_OF_FILE:
        return _GROUP_OF_FILE[path.name]
    return str(path) if folder in _GROUPED_BY_FILE else nodeid


class GroupedScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's scope scheduling with `xdist_group` for its scope. Larger groups go first
    (xdist's `--loadscope-reorder`, on by default), so the real node and Spark start early
    instead of ending the run alone."""

    # xdist's own file and group schedulings override this method the same way.
    def _split_scope(self, nodeid: str) -> str:
        return xdist_group(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> GroupedScheduling | None:
    return GroupedScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


# The run's longest chains start first (`make test` keeps xdist to the collection's order),
# so the run does not end waiting on one of them: the real node's and Spark's groups, then
# the simulation's CPU-bound parts.
_STARTED_FIRST = ("realnode", "spark", "tests/sim/test_simulation.py")


def _start_rank(item: pytest.Item) -> int:
    for rank, start in enumerate(_STARTED_FIRST):
        if start in (xdist_group(item.nodeid), item.nodeid.split("::", 1)[0]):
            return rank
    return len(_STARTED_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
    items.sort(key=_start_rank)  # stable: a file's tests keep their order


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
