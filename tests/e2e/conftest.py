from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from testbed.controlplane import ControlPlane
from testbed.dynamodb import DynamoDBLocal
from testbed.kinesis import KinesisEmulator
from testbed.scenario import Scenario
from testbed.table_scenario import TableScenario


@pytest.fixture
def scenario(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    kinesis: KinesisEmulator,
    namespace: str,
    stream_name: str,
    tmp_path: Path,
) -> Iterator[Scenario]:
    running = Scenario(control_plane, api_client, kinesis, namespace, stream_name, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def kinesalite_scenario(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    kinesalite: KinesisEmulator,
    namespace: str,
    stream_name: str,
    tmp_path: Path,
) -> Iterator[Scenario]:
    """The same on kinesalite, where `make bench-peers` runs KCL. (kinesis-local lists a
    closed shard's EndingSequenceNumber as 2^63 - 1, below its records' sequence numbers,
    so the KCL import refuses a checkpoint in a shard split after it.)"""
    running = Scenario(control_plane, api_client, kinesalite, namespace, stream_name, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def table_scenario(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    dynamodb_local: DynamoDBLocal,
    namespace: str,
    table_name: str,
    tmp_path: Path,
) -> Iterator[TableScenario]:
    running = TableScenario(
        control_plane, api_client, dynamodb_local, namespace, table_name, tmp_path
    )
    yield running
    running.stop()
