"""Pod Security Standard `restricted` on the real apiserver (its PodSecurity admission
plugin, on by default): the chart's operator pod and a StreamConsumer's worker pods are
admitted in a namespace that enforces it; pods without those settings are refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.controller.workloads.children import deployment
from streamconsumer.models.resource import StreamConsumerSpec
from testbed import charts
from testbed.controlplane import ControlPlane

SPEC = {
    "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
    "processor": {"image": "example/clicks:1", "entrypoint": "clicks.processor:Counter"},
}


@pytest.fixture
def restricted(api_client: k8s.ApiClient, namespace: str) -> str:
    k8s.CoreV1Api(api_client).patch_namespace(
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    return namespace


def admit(api_client: k8s.ApiClient, namespace: str, template: dict[str, Any]) -> None:
    """Creates a Pod from a pod template (server-side dry run: every admission runs)."""
    core = k8s.CoreV1Api(api_client)
    account = template["spec"]["serviceAccountName"]  # admission looks it up
    try:
        core.create_namespaced_service_account(
            namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=account))
        )
    except ApiException as error:
        if error.status != 409:
            raise
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "labels": template["metadata"].get("labels", {})},
        "spec": template["spec"],
    }
    core.create_namespaced_pod(namespace, pod, dry_run="All")  # type: ignore[arg-type]  # a dict is fine


def refused(api_client: k8s.ApiClient, namespace: str, template: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as error:
        admit(api_client, namespace, template)
    assert error.value.status == 403, error.value.body
    return str(error.value.body)


def chart_operator_template(helm: Path, namespace: str) -> dict[str, Any]:
    rendered = helm_template(helm, namespace)
    (operator,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    template: dict[str, Any] = operator["spec"]["template"]
    return template


def helm_template(helm: Path, namespace: str) -> str:
    return charts.rendered(helm, "-n", namespace)


def worker_template(spec: dict[str, Any]) -> dict[str, Any]:
    spec_model = StreamConsumerSpec.model_validate(spec)
    manifest = deployment("team-a", "clicks", spec_model, "https://x", AUDIENCE)
    template: dict[str, Any] = manifest["spec"]["template"]
    return template


def test_the_chart_operator_pod_is_admitted_under_restricted(
    helm: Path, control_plane: ControlPlane, api_client: k8s.ApiClient, restricted: str
) -> None:
    template = chart_operator_template(helm, restricted)
    admit(api_client, restricted, template)
    # The control: without its container settings the same pod is refused.
    bare = copy.deepcopy(template)
    del bare["spec"]["containers"][0]["securityContext"]
    assert "violates PodSecurity" in refused(api_client, restricted, bare)


def test_worker_pods_are_admitted_under_restricted_with_or_without_a_users_context(
    api_client: k8s.ApiClient, restricted: str
) -> None:
    admit(api_client, restricted, worker_template(SPEC))
    users = {**SPEC, "pod": {"securityContext": {"runAsUser": 20000, "fsGroup": 20000}}}
    admit(api_client, restricted, worker_template(users))


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("capabilities", "unrestricted capabilities"),
        ("seccompProfile", "seccompProfile"),
        ("allowPrivilegeEscalation", "allowPrivilegeEscalation"),
        ("runAsNonRoot", "runAsNonRoot"),
    ],
)
def test_a_worker_pod_missing_a_restricted_setting_is_refused(
    api_client: k8s.ApiClient, restricted: str, drop: str, named: str
) -> None:
    template = worker_template(SPEC)
    del template["spec"]["containers"][0]["securityContext"][drop]
    message = refused(api_client, restricted, template)
    assert "violates PodSecurity" in message
    assert named in message
