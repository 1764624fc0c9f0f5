"""The real-node tier's fixtures: one control plane and one real node for the tier (images
and binaries built, the node in namespaces of its own), a Kinesis emulator running on
the node, and the operator installed the way the README's install section says.

Nothing here skips: a machine that cannot run the node fails the tier with the reason.
After the session the node must have left the machine as it found it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from realnode.own_release import OwnRelease
from realnode.user import NodeUser
from testbed import machine
from testbed.kinesis import KinesisEmulator
from testbed.node import Cluster
from testbed.userpath import RELEASE_NAMESPACE, Kubectl, consumer_namespace, install_operator


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    before = machine.snapshot()
    workdir = tmp_path_factory.mktemp("realnode")
    started = Cluster.start(workdir)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(workdir / "node", ignore_errors=True)  # large: image layers
        left = machine.differences(before, machine.snapshot())
        assert not left, "the real node left this behind on the machine:\n" + "\n".join(left)


@pytest.fixture(scope="package")
def kubectl(cluster: Cluster) -> Kubectl:
    return Kubectl(cluster)


@pytest.fixture(scope="package")
def emulator(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KinesisEmulator]:
    """kinesis-local running on the node: pods reach it at the node's address."""
    node = cluster.node
    started = KinesisEmulator.start(
        "kinesis-local",
        tmp_path_factory.mktemp("kinesis-on-node"),
        enter=node.spaces.enter,
        host=node.ip,
    )
    yield started
    started.stop()


@pytest.fixture(scope="package")
def operator_namespace(
    cluster: Cluster, helm: Path, kubectl: Kubectl, emulator: KinesisEmulator
) -> str:
    install_operator(cluster, helm, kubectl, emulator)
    return RELEASE_NAMESPACE


@pytest.fixture
def user(operator_namespace: str, user_before_install: NodeUser) -> NodeUser:
    """A consumer's test with the operator installed as the README says."""
    return user_before_install


@pytest.fixture
def user_before_install(
    cluster: Cluster, kubectl: Kubectl, emulator: KinesisEmulator, consumer_ns: str
) -> NodeUser:
    """A test that installs the operator itself (from an older chart, say)."""
    return NodeUser(cluster, kubectl, emulator, consumer_ns)


@pytest.fixture
def own_release(cluster: Cluster, helm: Path, kubectl: Kubectl, tmp_path: Path) -> OwnRelease:
    """A chart release of the test's own, with helm's config in its directory."""
    return OwnRelease(cluster, helm, kubectl, tmp_path)


@pytest.fixture
def consumer_ns(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace with a credentials Secret, deleted afterwards."""
    name = f"{request.node.name[5:25].replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    consumer_namespace(kubectl, name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")
