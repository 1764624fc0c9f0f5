"""A Helm release of the chart that a real-node test installs itself, from an older chart,
on a cluster with no StreamConsumer CRD yet (so it runs first in the tier), and removes
with all it installed, the CRD included, so the tests after it find the cluster as the
tier expects (tests/realnode/conftest.py installs the chart the README's way)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from testbed.charts import CRD
from testbed.node import Cluster
from testbed.userpath import RELEASE_NAMESPACE, Kubectl, consumer_namespace

RELEASE = "streamconsumer"


class OwnRelease:
    def __init__(self, cluster: Cluster, helm: Path, kubectl: Kubectl, workdir: Path) -> None:
        self._plane = cluster.plane
        self._helm = helm
        self._kubectl = kubectl
        self._env = {
            **os.environ,
            "KUBECONFIG": str(self._plane.kubeconfig),
            "HELM_CONFIG_HOME": str(workdir / "helm-config"),
            "HELM_CACHE_HOME": str(workdir / "helm-cache"),
            "HELM_DATA_HOME": str(workdir / "helm-data"),
        }
        there = self._kubectl_quietly("get", "crd", CRD)
        assert there.returncode != 0, (
            f"{CRD} is installed already: this test installs it from an older chart, so it "
            "must run before anything else installs the chart (run it first, or alone)"
        )

    def helm(self, *args: str | Path) -> str:
        """helm with this release's own config; its stdout, or an assertion with its
        stderr and the cluster's pods."""
        done = subprocess.run(
            [str(self._helm), *map(str, args)],
            capture_output=True,
            text=True,
            env=self._env,
            timeout=600,
        )
        if done.returncode != 0:
            pods = self._kubectl("get", "pods", "-A", "-o", "wide")
            raise AssertionError(f"helm {args[0]} failed:\n{done.stderr}\n{pods}")
        return done.stdout

    def install(self, chart: str | Path, emulator_host: str, *values: str) -> None:
        """Installs `chart` (with `values`) in the release's namespace, made with the
        credentials Secret: the operator reads it, and may reach the emulator over HTTP."""
        consumer_namespace(self._kubectl, RELEASE_NAMESPACE)
        allowed = {"default": {"endpoints": [emulator_host], "allowHttp": True}}
        self.helm(
            "install", RELEASE, chart, "-n", RELEASE_NAMESPACE, *values,
            "--set-json", 'envFrom=[{"secretRef":{"name":"aws-credentials"}}]',
            "--set-json", f"awsAccess={json.dumps(allowed)}",
            "--wait", "--timeout", "5m",
        )  # fmt: skip

    def remove(self, namespace: str) -> None:
        """All the test installed goes, the CRD too; never raises: what is left is for the
        tier's machine check to see."""
        self._kubectl_quietly(
            "-n", namespace, "delete", "streamconsumer", "--all", "--timeout=180s"
        )
        subprocess.run(
            [str(self._helm), "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait"],
            capture_output=True,
            env=self._env,
            timeout=300,
            check=False,
        )
        self._kubectl_quietly("delete", "crd", CRD, "--ignore-not-found", "--timeout=120s")
        self._kubectl_quietly(
            "delete", "namespace", RELEASE_NAMESPACE, "--ignore-not-found", "--timeout=180s"
        )

    def _kubectl_quietly(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._plane.bin_dir / "kubectl"), f"--kubeconfig={self._plane.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
