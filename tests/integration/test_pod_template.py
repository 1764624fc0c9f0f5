"""spec.pod and the container's env on the real apiserver (issue 13.3): what a platform
team sets reaches the worker Pods the controller manager creates, the drain deadline
follows the grace period, the workers get a PodDisruptionBudget, and the CRD (with
Kubernetes' own schemas) refuses bad values at apply time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.names import label_selector
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess

from .test_control_plane import sample_consumer

POD: dict[str, Any] = {
    "labels": {"team": "clicks"},
    "annotations": {"example.com/owner": "data-platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "streams", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a", "b"]}
                        ]
                    },
                }
            ]
        }
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"team": "clicks"}},
        }
    ],
    "priorityClassName": "streams-high",
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "spark-scratch", "emptyDir": {"sizeLimit": "2Gi"}}],
    "volumeMounts": [{"name": "spark-scratch", "mountPath": "/scratch"}],
    "terminationGracePeriodSeconds": 45,
}


@pytest.fixture
def priority_class(api_client: k8s.ApiClient) -> Iterator[str]:
    """The Priority admission plugin refuses pods naming a class that does not exist."""
    scheduling = k8s.SchedulingV1Api(api_client)
    scheduling.create_priority_class(
        k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name="streams-high"), value=1000)
    )
    yield "streams-high"
    scheduling.delete_priority_class("streams-high")


def test_pod_settings_reach_the_worker_pods(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    namespace: str,
    priority_class: str,
    tmp_path: Path,
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="tuning"), data={"BATCH": "500"}),
    )
    consumer = sample_consumer("clicks")
    consumer["spec"]["pod"] = POD
    consumer["spec"]["processor"]["env"] = [
        {"name": "PLAIN", "value": "1"},
        {
            "name": "BATCH_SIZE",
            "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "BATCH"}},
        },
    ]
    consumer["spec"]["processor"]["envFrom"] = [{"configMapRef": {"name": "tuning"}}]
    operator = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    try:
        StreamConsumers(api_client, namespace).create(consumer)
        pods: list[k8s.V1Pod] = []
        deadline = time.monotonic() + 90
        while not pods and time.monotonic() < deadline:
            pods = core.list_namespaced_pod(
                namespace, label_selector=label_selector("clicks")
            ).items
            time.sleep(0.3)
        assert pods, "the controller manager should create the worker pod"
    finally:
        operator.stop()
    pod = api_client.sanitize_for_serialization(pods[0])  # type: ignore[no-untyped-call]
    spec = pod["spec"]
    assert pod["metadata"]["labels"]["team"] == "clicks"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "data-platform"
    for field in ("nodeSelector", "affinity", "priorityClassName", "imagePullSecrets"):
        assert spec[field] == POD[field], field
    assert POD["tolerations"][0] in spec["tolerations"]
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert spec["securityContext"]["fsGroup"] == 2000
    assert spec["terminationGracePeriodSeconds"] == 45
    assert {"name": "spark-scratch", "emptyDir": {"sizeLimit": "2Gi"}} in spec["volumes"]
    (container,) = spec["containers"]
    assert {"name": "spark-scratch", "mountPath": "/scratch"} in container["volumeMounts"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PLAIN"]["value"] == "1"
    assert env["BATCH_SIZE"]["valueFrom"]["configMapKeyRef"]["key"] == "BATCH"
    assert env["STREAMCONSUMER_DRAIN_SECONDS"]["value"] == "40.0", "grace less the margin"
    assert container["envFrom"] == [{"configMapRef": {"name": "tuning"}}]
    budget = k8s.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(
        "clicks-workers", namespace
    )
    assert budget.spec is not None
    assert budget.spec.max_unavailable == 1


BAD = [
    pytest.param(
        {"tolerations": [{"key": "k", "tolerationSeconds": "soon"}]},
        "spec.pod.tolerations[0].tolerationSeconds",
        id="toleration-seconds-not-a-number",
    ),
    pytest.param(
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 3}}},
        "spec.pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        id="affinity-of-the-wrong-shape",
    ),
    pytest.param(
        {"volumes": [{"name": "scratch", "emptyDir": {}}]},
        "volume names scratch, streamconsumer-token, streamconsumer-operator-ca are the worker's"
        " own",
        id="reserved-volume",
    ),
    pytest.param(
        {"volumeMounts": [{"name": "x", "mountPath": "/etc/streamconsumer.io/operator-ca"}]},
        "are mounted by the worker already",
        id="reserved-ca-mount",
    ),
    pytest.param(
        {"volumeMounts": [{"name": "x", "mountPath": "/tmp"}]},
        "are mounted by the worker already",
        id="reserved-mount",
    ),
    pytest.param(
        {"labels": {"app.kubernetes.io/name": "mine"}},
        "select the workers: they are set for you",
        id="reserved-label",
    ),
    pytest.param(
        {"terminationGracePeriodSeconds": 2},
        "spec.pod.terminationGracePeriodSeconds",
        id="grace-too-short",
    ),
]


@pytest.mark.parametrize(("pod", "message"), BAD)
def test_bad_pod_settings_are_refused_at_apply_time(
    control_plane: ControlPlane, namespace: str, pod: dict[str, Any], message: str
) -> None:
    consumer = sample_consumer("clicks")
    consumer["spec"]["pod"] = pod
    result = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(consumer))
    output = result.stderr + result.stdout
    assert result.returncode != 0, output
    assert message in output, output


def test_value_and_value_from_together_are_refused(
    control_plane: ControlPlane, namespace: str
) -> None:
    consumer = sample_consumer("clicks")
    consumer["spec"]["processor"]["env"] = [
        {"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]
    result = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(consumer))
    assert result.returncode != 0
    assert "give value or valueFrom, not both" in result.stderr + result.stdout
