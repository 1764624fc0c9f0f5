"""`streamconsumer status` against the real apiserver."""

from __future__ import annotations

import subprocess
import sys

from kubernetes import client as k8s

from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers

from .test_control_plane import sample_consumer


def cli(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "streamconsumer.cli",
            "status",
            "--kubeconfig",
            str(plane.kubeconfig),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_status_shows_leases_and_conditions(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("orders"))
    body = consumers.get("orders")
    body["status"] = {
        "shards": 1,
        "leases": {
            "shardId-000000000000": {
                "owner": "orders-workers-abc",
                "epoch": 3,
                "checkpoint": "4967",
                "state": "Active",
                "millisBehindLatest": 1200,
            }
        },
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllShardsOwned",
                "message": "1 shards owned by 1 workers",
                "lastTransitionTime": "2026-11-22T10:00:00Z",
            }
        ],
    }
    consumers.replace_status("orders", body)
    shown = cli(control_plane, "orders", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "shardId-000000000000" in line)
    for value in ("orders-workers-abc", "3", "4967", "1200", "Active"):
        assert value in row
    assert "AllShardsOwned" in shown.stdout


def test_missing_consumer_is_a_clear_error(control_plane: ControlPlane, namespace: str) -> None:
    missing = cli(control_plane, "nope", "-n", namespace)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"streamconsumer: {namespace}/nope not found"
