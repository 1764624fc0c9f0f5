"""The status tells the truth (issue 25) on the real operator and apiserver: when the
workers' objects cannot be applied, Ready is False with the apiserver's reason, and
`kubectl get stc` (not "sc": that is StorageClasses) shows it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from streamconsumer.models import API_VERSION, KIND
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.waiting import wait_for

# A valid StreamConsumer name, but too long for the label that selects its workers
# (label values stop at 63 characters): the apiserver refuses the workers' objects.
LONG_NAME = "clicks-" + "x" * 70


@pytest.fixture
def operator(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    yield process
    process.stop()


def conditions(consumers: StreamConsumers, name: str) -> dict[str, dict[str, str]]:
    listed = consumers.get(name).get("status", {}).get("conditions", [])
    return {c["type"]: c for c in listed}


def test_workers_objects_the_apiserver_refuses_make_ready_false_with_its_reason(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": LONG_NAME},
            "spec": {
                "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
                "processor": {"image": "example/clicks:1", "entrypoint": "clicks:Processor"},
            },
        }
    )

    def refused() -> bool:
        applied = conditions(consumers, LONG_NAME).get("ChildrenApplied", {})
        return applied.get("status") == "False" and applied.get("reason") == "Refused"

    wait_for(refused, 60, "ChildrenApplied False")
    found = conditions(consumers, LONG_NAME)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "ChildrenNotApplied")
    assert "was refused (422)" in found["Ready"]["message"]
    assert "must be no more than 63" in found["Ready"]["message"], "the apiserver's words"
    assert found["Stalled"]["status"] == "True"

    shown = control_plane.kubectl("-n", namespace, "get", "stc", LONG_NAME)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    ready, reason, age = (header.index(column) for column in ("READY", "REASON", "AGE"))
    assert row[ready:reason].strip() == "False", shown.stdout
    assert row[reason:age].strip() == "ChildrenNotApplied", shown.stdout
