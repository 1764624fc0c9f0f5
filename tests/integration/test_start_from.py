"""spec.startFrom (issue 25) on the real operator and apiserver: a new StreamConsumer of
another name starts from the checkpoints kept for the one it names (a rename through
GitOps, a restore that skipped status); one whose named checkpoints are missing does not
start at all, and says why, rather than start from its initialPosition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.waiting import wait_for

from .test_control_plane import sample_consumer

SHARD = "shardId-000000000000"


def events(api_client: k8s.ApiClient, namespace: str, name: str) -> list[tuple[str, str]]:
    listed = k8s.CoreV1Api(api_client).list_namespaced_event(namespace)
    return [
        (e.reason or "", e.message or "")
        for e in listed.items
        if e.involved_object.kind == "StreamConsumer" and e.involved_object.name == name
    ]


def starting_from(name: str, source: str) -> dict[str, Any]:
    manifest = sample_consumer(name)
    manifest["spec"]["startFrom"] = {"checkpointsOf": source}
    return manifest


def test_a_new_consumer_starts_from_the_checkpoints_its_spec_names(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("orders"))
    body = consumers.get("orders")
    body["status"] = {
        "leases": {SHARD: {"epoch": 3, "checkpoint": "4967", "state": "Released"}},
        "term": {"number": 2, "holder": "an-operator-before"},
    }
    consumers.replace_status("orders", body)
    operator = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "op").start()
    try:
        # A GitOps prune of "orders": its table is kept (onDelete: Keep, the default) ...
        def loaded() -> bool:
            # Fenced by this operator and carrying kopf's finalizer: a delete before the
            # finalizer lands is not seen by the consume daemon, so nothing is kept (an
            # object the operator knew before always has it; this one was made by hand).
            body = consumers.get("orders")
            term = body.get("status", {}).get("term") or {}
            fenced = bool(term) and term.get("holder") != "an-operator-before"
            return fenced and bool(body["metadata"].get("finalizers"))

        wait_for(loaded, 60, "orders loaded by this operator")
        consumers.delete("orders")
        wait_for(lambda: not consumers.exists("orders"), 90, "orders gone")
        core = k8s.CoreV1Api(api_client)
        assert core.read_namespaced_config_map("orders-checkpoints", namespace).data
        # ... and the rename in Git: a new name that starts from it.
        consumers.create(starting_from("orders-v2", "orders"))
        consumers.create(starting_from("refunds", "nothing-kept"))

        def resumed() -> bool:
            lease = consumers.get("orders-v2").get("status", {}).get("leases", {}).get(SHARD)
            return bool(lease) and lease["checkpoint"] == "4967"

        wait_for(resumed, 60, "orders-v2 holding orders' checkpoint")
        said = events(api_client, namespace, "orders-v2")
        assert any(r == "CheckpointsResumed" for r, _ in said), said

        def refused() -> list[str]:
            return [
                m
                for r, m in events(api_client, namespace, "refunds")
                if r == "CheckpointsNotResumed"
            ]

        wait_for(lambda: bool(refused()), 60, "refunds refusing to start")
        assert "nothing-kept" in refused()[0]
        status = consumers.get("refunds").get("status") or {}
        assert "term" not in status, "it did not start"
        assert not status.get("leases")
    finally:
        operator.stop()
