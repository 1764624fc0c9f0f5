"""`streamconsumer status` against the real apiserver."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from streamconsumer.models.kept import resumable
from streamconsumer.models.resource import StreamConsumerSpec
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


def checkpoints(plane: ControlPlane, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "streamconsumer.cli", "checkpoints", *args,
         "--kubeconfig", str(plane.kubeconfig)],
        capture_output=True, text=True, timeout=60, input=stdin,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_checkpoints_move_to_another_namespace_and_name(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    """A namespace move with a rename (issue 25): export the table, import it for the new
    name elsewhere; a new StreamConsumer there resumes from it."""
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("orders"))
    body = consumers.get("orders")
    body["status"] = {
        "leases": {
            "shardId-000000000000": {
                "owner": "w",
                "epoch": 3,
                "checkpoint": "4967",
                "state": "Active",
            }
        },
        "term": {"number": 2, "holder": "op"},
    }
    consumers.replace_status("orders", body)

    exported = checkpoints(control_plane, "export", "orders", "-n", namespace)
    assert exported.returncode == 0, exported.stderr
    assert "processed again" in exported.stderr, "a live export says what it means"
    table = json.loads(exported.stdout)
    assert table["status"]["leases"]["shardId-000000000000"]["checkpoint"] == "4967"

    again = checkpoints(control_plane, "import", "-", "-n", namespace, stdin=exported.stdout)
    assert again.returncode != 0
    assert "has checkpoints of its own" in again.stderr

    other = f"{namespace}-moved"
    core = k8s.CoreV1Api(api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    try:
        moved = checkpoints(
            control_plane, "import", "-", "-n", other, "--name", "sales", stdin=exported.stdout
        )
        assert moved.returncode == 0, moved.stderr
        assert "ConfigMap sales-checkpoints" in moved.stdout
        kept = core.read_namespaced_config_map("sales-checkpoints", other)
        assert kept.data is not None
        spec = StreamConsumerSpec.model_validate(sample_consumer("sales")["spec"])
        resumed, why_not = resumable(kept.data, "sales", spec, datetime.now(UTC))
        assert resumed is not None, why_not
        assert resumed.status["leases"]["shardId-000000000000"]["checkpoint"] == "4967"
        assert resumed.namespace == other

        junk = checkpoints(control_plane, "import", "-", "-n", other, stdin='{"format": 1}')
        assert junk.returncode != 0
        assert "not an exported table" in junk.stderr
        assert "Traceback" not in junk.stderr
    finally:
        core.delete_namespace(other)
