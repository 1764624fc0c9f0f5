"""Where a benchmark runs: a scratch directory and a local control plane in it, serving
our CRD (`with_the_crd`); kinesalite for those that need a stream alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator
from testbed.waiting import wait_for

CRD = Path(__file__).resolve().parents[1] / "crds" / "streamconsumer.yaml"


@contextlib.contextmanager
def kinesalite() -> Iterator[KinesisEmulator]:
    """A kinesalite started for a benchmark, and stopped after it (the emulator takes any
    credentials: the process gets some if it has none)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with KinesisEmulator.start("kinesalite") as emulator:
        yield emulator


@contextlib.contextmanager
def scratch_plane(prefix: str) -> Iterator[tuple[Path, ControlPlane]]:
    """A new scratch directory (its name starting with `prefix`) and a control plane in
    it; both removed on exit."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        plane = ControlPlane.start(work / "cp")
        try:
            yield work, plane
        finally:
            plane.remove()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def with_the_crd(plane: ControlPlane) -> k8s.ApiClient:
    """The StreamConsumer CRD applied to `plane` and served; a client of the plane."""
    assert plane.kubectl("apply", "--server-side", "-f", str(CRD)).returncode == 0
    wait_for(lambda: plane.kubectl("get", "streamconsumers", "-A").returncode == 0, 60, "CRD")
    return api_client(plane)


def api_client(plane: ControlPlane) -> k8s.ApiClient:
    client: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(plane.kubeconfig)
    )
    return client
