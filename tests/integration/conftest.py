"""Fixtures the integration tests share (the session's control plane and namespaces are
in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulators take any; boto3 needs some to sign with."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def operator(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The real operator, as a process, for the test's namespace (tests with other
    settings define their own)."""
    process = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    yield process
    process.stop()
