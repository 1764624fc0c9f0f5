from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator
from testbed.scenario import Scenario


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
