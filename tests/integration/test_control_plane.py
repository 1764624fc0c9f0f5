"""The local control plane is a real one: CRDs with subresources, optimistic concurrency,
controllers that turn Deployments into Pods, ServiceAccount tokens, kubectl."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers, deployment
from testbed.specs import consumer_manifest


def sample_consumer(name: str) -> dict[str, Any]:
    return consumer_manifest(
        name,
        image="example/processor:1",
        entrypoint="orders.process:Handler",
        source={"kinesis": {"streamName": "orders"}},
    )


def test_status_update_is_guarded_by_resource_version(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("orders"))
    current = consumers.get("orders")
    assert current["spec"]["source"]["kinesis"]["streamName"] == "orders"
    assert current["spec"]["replicas"] == 1, "defaults from the schema are applied"
    stale_version = current["metadata"]["resourceVersion"]

    current["status"] = {"shards": 4, "replicas": 0}
    updated = consumers.replace_status("orders", current)
    assert updated["status"]["shards"] == 4
    assert updated["metadata"]["resourceVersion"] != stale_version

    current["metadata"]["resourceVersion"] = stale_version
    current["status"] = {"shards": 99, "replicas": 0}
    with pytest.raises(ApiException) as refused:
        consumers.replace_status("orders", current)
    assert refused.value.status == 409
    assert consumers.get("orders")["status"]["shards"] == 4


def test_scale_subresource_reads_and_writes_spec_replicas(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("scaled"))
    consumers.patch_scale("scaled", 3)
    assert consumers.get_scale("scaled")["spec"]["replicas"] == 3
    assert consumers.get("scaled")["spec"]["replicas"] == 3


def test_deployment_gets_pods_from_the_controller_manager(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    probe = deployment("probe", "busybox", 2, {"app": "probe"})
    k8s.AppsV1Api(api_client).create_namespaced_deployment(namespace, probe)
    core = k8s.CoreV1Api(api_client)
    deadline = time.monotonic() + 60
    pods: list[k8s.V1Pod] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector="app=probe").items
        if len(pods) == 2:
            break
        time.sleep(0.2)
    assert len(pods) == 2, "the ReplicaSet controller should create both pods"
    # The ServiceAccount admission plugin mounted a projected token, as on a real cluster.
    assert pods[0].spec is not None
    volumes = pods[0].spec.volumes or []
    assert any(v.projected and v.name.startswith("kube-api-access") for v in volumes)


def test_token_request_and_token_review_check_the_audience(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_service_account(
        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="worker"))
    )
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=["streamconsumer.io"], expiration_seconds=600)
    )
    issued = core.create_namespaced_service_account_token("worker", namespace, request).status
    assert issued is not None
    token = issued.token

    def review(audience: str) -> k8s.V1TokenReviewStatus:
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience]))
        status = k8s.AuthenticationV1Api(api_client).create_token_review(body).status
        assert status is not None
        return status

    accepted = review("streamconsumer.io")
    assert accepted.authenticated
    assert accepted.user is not None
    assert accepted.user.username == f"system:serviceaccount:{namespace}:worker"
    assert review("somebody-else").authenticated is not True


def test_kubectl_lists_streamconsumers(control_plane: ControlPlane, namespace: str) -> None:

    applied = control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(sample_consumer("via-kubectl"))
    )
    assert applied.returncode == 0, applied.stderr
    listed = control_plane.kubectl("get", "streamconsumers", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    columns = ["NAME", "SHARDS", "WORKERS", "LAG(MS)", "READY", "REASON", "COMPLETE", "AGE"]
    assert header.split() == columns
    assert row.split()[0] == "via-kubectl"
