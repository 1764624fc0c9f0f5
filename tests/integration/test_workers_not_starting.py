"""Workers that never start reach the status (issue 25), on the real apiserver and
kube-controller-manager, with no kubelet: a Deployment that applies fine but whose
ReplicaSet may not make pods (a ResourceQuota: the controller-manager's real refusal), and
a worker pod whose image cannot be pulled (its status written by hand, as a kubelet would:
this tier has no node; tests/realnode/test_workers_not_starting.py has the real kubelet).
Both make Ready False with reason WorkersNotStarting, the apiserver's or kubelet's words in
the message, Stalled True (kstatus), a WorkersAvailable condition and a Warning Event."""

from __future__ import annotations

import datetime

from kubernetes import client as k8s

from streamconsumer.models.resource import CONSUMER_LABEL
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.specs import consumer_manifest
from testbed.waiting import wait_for


def kubectl_ready_and_reason(plane: ControlPlane, namespace: str, name: str) -> tuple[str, str]:
    shown = plane.kubectl("-n", namespace, "get", "stc", name)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    ready, reason, age = (header.index(column) for column in ("READY", "REASON", "AGE"))
    return row[ready:reason].strip(), row[reason:age].strip()


def warning_events(api_client: k8s.ApiClient, namespace: str, name: str) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [e for e in listed.items if e.type == "Warning"]


def test_a_replica_set_refused_by_a_quota_makes_ready_false_with_the_apiservers_words(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(
        namespace,
        k8s.V1ResourceQuota(
            metadata=k8s.V1ObjectMeta(name="no-pods"),
            spec=k8s.V1ResourceQuotaSpec(hard={"pods": "0"}),
        ),
    )
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer_manifest("clicks"))

    def not_starting() -> bool:
        return consumers.conditions("clicks").get("Ready", {}).get("reason") == "WorkersNotStarting"

    wait_for(not_starting, 90, "Ready False, WorkersNotStarting")
    found = consumers.conditions("clicks")
    assert found["ChildrenApplied"]["status"] == "True", "the Deployment itself applied"
    assert found["Ready"]["status"] == "False"
    assert "ReplicaFailure" in found["Ready"]["message"]
    assert "exceeded quota" in found["Ready"]["message"], "the apiserver's words"
    assert (found["Stalled"]["status"], found["Stalled"]["reason"]) == (
        "True",
        "WorkersNotStarting",
    )
    available = found["WorkersAvailable"]
    assert (available["status"], available["reason"]) == ("False", "WorkersNotStarting")
    assert kubectl_ready_and_reason(control_plane, namespace, "clicks") == (
        "False",
        "WorkersNotStarting",
    )
    wait_for(
        lambda: any(
            e.reason == "WorkersNotStarting" and "exceeded quota" in (e.message or "")
            for e in warning_events(api_client, namespace, "clicks")
        ),
        30,
        "a WorkersNotStarting Event",
    )


def test_a_worker_pod_whose_image_cannot_be_pulled_makes_ready_false_with_the_kubelets_words(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer_manifest("clicks", image="example/does-not-exist:1"))
    core = k8s.CoreV1Api(api_client)
    selector = f"{CONSUMER_LABEL}=clicks"

    def pods() -> list[k8s.V1Pod]:
        return list(core.list_namespaced_pod(namespace, label_selector=selector).items)

    wait_for(lambda: bool(pods()), 60, "the controller-manager making a worker pod")
    pod = pods()[0]
    assert pod.metadata is not None
    assert pod.spec is not None
    pod_name = str(pod.metadata.name)
    # What the kubelet writes when the registry has no such image (no kubelet here).
    waiting = (
        'Back-off pulling image "example/does-not-exist:1": ErrImagePull: failed to pull '
        "and unpack image: not found"
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_pod_status(
        pod_name,
        namespace,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
                ],
                "containerStatuses": [
                    {
                        "name": pod.spec.containers[0].name,
                        "image": "example/does-not-exist:1",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": waiting}},
                    }
                ],
            }
        },
    )

    def not_starting() -> bool:
        return consumers.conditions("clicks").get("Ready", {}).get("reason") == "WorkersNotStarting"

    wait_for(not_starting, 60, "Ready False, WorkersNotStarting")
    found = consumers.conditions("clicks")
    assert found["Ready"]["status"] == "False"
    assert f"ImagePullBackOff (pod {pod_name})" in found["Ready"]["message"]
    assert "does-not-exist:1" in found["Ready"]["message"], "the kubelet's words"
    assert found["Stalled"]["status"] == "True"
    assert found["WorkersAvailable"]["status"] == "False"
    assert found["Degraded"]["status"] == "True"
    assert kubectl_ready_and_reason(control_plane, namespace, "clicks") == (
        "False",
        "WorkersNotStarting",
    )
    wait_for(
        lambda: any(
            e.reason == "WorkersNotStarting"
            for e in warning_events(api_client, namespace, "clicks")
        ),
        30,
        "a WorkersNotStarting Event",
    )

    # The pod goes (a fixed image rolls out): the trouble goes with it.
    core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
    wait_for(
        lambda: (
            consumers.conditions("clicks").get("Ready", {}).get("reason") != "WorkersNotStarting"
        ),
        60,
        "WorkersNotStarting cleared once the pod is gone",
    )
