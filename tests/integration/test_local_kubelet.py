"""The test bed's kubelet converges like a real one: a pod deleted while its watch was
not looking (events lost between two watches) still has its process stopped."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from testbed.kubelet import LocalKubelet
from testbed.waiting import wait_for


@pytest.fixture
def lossy_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every deletion event is lost: only a kubelet that reconciles notices."""
    stream: Any = watch.Watch.stream  # untyped in the kubernetes package

    def without_deletions(self: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for event in stream(self, *args, **kwargs):
            deleting = event["type"] == "DELETED" or (
                event["type"] != "BOOKMARK" and event["object"].metadata.deletion_timestamp
            )
            if not deleting:
                yield event

    monkeypatch.setattr(watch.Watch, "stream", without_deletions)


def test_a_pod_deleted_unseen_is_stopped(
    api_client: k8s.ApiClient, namespace: str, tmp_path: Path, lossy_watch: None
) -> None:
    core = k8s.CoreV1Api(api_client)
    label = f"kubelet-test={uuid.uuid4().hex[:8]}"
    kubelet = LocalKubelet(api_client, namespace, label, tmp_path).start()
    try:
        pod = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="sleeper", labels=dict([label.split("=")])),
            spec=k8s.V1PodSpec(
                containers=[
                    k8s.V1Container(
                        name="c",
                        image="none",
                        command=[sys.executable, "-c", "import time; time.sleep(600)"],
                    )
                ],
                termination_grace_period_seconds=1,
            ),
        )
        core.create_namespaced_pod(namespace, pod)
        wait_for(lambda: kubelet.running() == ["sleeper"], 30, "the pod to run")
        core.delete_namespaced_pod("sleeper", namespace, grace_period_seconds=0)
        took = wait_for(lambda: kubelet.running() == [], 30, "the deleted pod's process to stop")
        assert took < 15
    finally:
        kubelet.stop()
