"""The workers' ServiceAccount named in the spec (`processor.serviceAccountName`, issue 25),
on the real operator process and the real apiserver: the operator makes and owns an
account of that name with the spec's annotations, runs the workers as it, never touches
one that is not its own (another team's, or another StreamConsumer's), the name cannot
change under running workers, and a pod of the workers running as it passes the worker
identity check while another pod running as it does not (docs/security.md)."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.models import KIND
from streamconsumer.models.api import WIRE_VERSION, WIRE_VERSION_HEADER
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.specs import consumer_manifest
from testbed.waiting import wait_for

ROLE = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/clicks-reader"}
BASE = consumer_manifest()


def consumer(name: str, account: str | None, **processor: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(BASE)
    manifest["metadata"]["name"] = name
    if account is not None:
        manifest["spec"]["processor"]["serviceAccountName"] = account
    manifest["spec"]["processor"].update(processor)
    return manifest


def controllers(account: k8s.V1ServiceAccount) -> list[tuple[str, str]]:
    refs = (account.metadata.owner_references if account.metadata else None) or []
    return [(r.kind, r.name) for r in refs if r.controller]


def read_account(core: k8s.CoreV1Api, name: str, namespace: str) -> k8s.V1ServiceAccount | None:
    try:
        return core.read_namespaced_service_account(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def degraded_message(consumers: StreamConsumers, name: str) -> str:
    conditions = consumers.get(name).get("status", {}).get("conditions", [])
    return next((c["message"] for c in conditions if c["type"] == "Degraded"), "")


def bound_token(core: k8s.CoreV1Api, namespace: str, account: str, pod: k8s.V1Pod) -> str:
    """A token of `account` bound to `pod`, for the operator's audience (as a kubelet
    mints a worker's)."""
    assert pod.metadata is not None
    bound = k8s.V1BoundObjectReference(
        kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
    )
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[AUDIENCE], bound_object_ref=bound)
    )
    status = core.create_namespaced_service_account_token(account, namespace, request).status
    assert status is not None
    assert status.token is not None
    return str(status.token)


def heartbeat(operator: OperatorProcess, namespace: str, name: str, pod: str, token: str) -> Any:
    return httpx.post(
        f"{operator.url}/v1/namespaces/{namespace}/streamconsumers/{name}/heartbeat",
        json={"worker": pod},
        headers={"Authorization": f"Bearer {token}", WIRE_VERSION_HEADER: str(WIRE_VERSION)},
        timeout=30,
    )


def test_the_named_account_is_made_owned_and_the_workers_run_as_it(
    api_client: k8s.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer("clicks", "clicks-reader", serviceAccountAnnotations=ROLE))

    def made() -> bool:
        account = read_account(core, "clicks-reader", namespace)
        return account is not None and controllers(account) == [(KIND, "clicks")]

    wait_for(made, 60, "the ServiceAccount clicks-reader, controlled by the StreamConsumer")
    account = read_account(core, "clicks-reader", namespace)
    assert account is not None
    assert account.metadata is not None
    assert account.metadata.annotations == ROLE
    assert account.automount_service_account_token is False
    assert read_account(core, "clicks-worker", namespace) is None, "no default account as well"
    wait_for(
        lambda: _exists(lambda: apps.read_namespaced_deployment("clicks-workers", namespace)),
        60,
        "the workers' Deployment",
    )
    deployment = apps.read_namespaced_deployment("clicks-workers", namespace)
    assert deployment.spec is not None
    assert deployment.spec.template.spec is not None
    assert deployment.spec.template.spec.service_account_name == "clicks-reader"

    # The name cannot change under running workers: the apiserver says so.
    with pytest.raises(ApiException) as refused:
        consumers.patch("clicks", {"spec": {"processor": {"serviceAccountName": "other"}}})
    assert refused.value.status == 422
    assert "serviceAccountName cannot change" in json.loads(refused.value.body or "{}")["message"]


def test_a_named_account_that_is_not_ours_is_left_untouched(
    api_client: k8s.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    """Another team's account (an IAM role trusts its name), and another StreamConsumer's:
    neither is patched, adopted, nor run as; the conflict is in Degraded and an Event."""
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    core.create_namespaced_service_account(
        namespace,
        k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="payments-reader", annotations=ROLE)),
    )
    before = core.read_namespaced_service_account("payments-reader", namespace).metadata
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer("borrower", "payments-reader"))
    # The first consumer's own account, then a second consumer naming it too.
    consumers.create(consumer("first", "shared-reader"))
    wait_for(
        lambda: _exists(lambda: core.read_namespaced_service_account("shared-reader", namespace)),
        60,
        "the first consumer's account",
    )
    consumers.create(consumer("second", "shared-reader"))

    for name, account in (("borrower", "payments-reader"), ("second", "shared-reader")):
        conflict = f"ServiceAccount {account} exists and is not this StreamConsumer's"
        wait_for(
            functools.partial(_says, consumers, name, conflict),
            60,
            f"{name}'s Degraded condition naming {account}",
        )
        with pytest.raises(ApiException) as missing:  # no pod runs as the borrowed account
            apps.read_namespaced_deployment(f"{name}-workers", namespace)
        assert missing.value.status == 404
    events = core.list_namespaced_event(namespace, field_selector="reason=ObjectConflict").items
    messages = " ".join(e.message or "" for e in events)
    assert "ServiceAccount payments-reader" in messages
    assert "ServiceAccount shared-reader" in messages
    after = core.read_namespaced_service_account("payments-reader", namespace).metadata
    assert after is not None
    assert before is not None
    assert after.resource_version == before.resource_version, "not patched"
    assert not after.owner_references
    shared = core.read_namespaced_service_account("shared-reader", namespace)
    assert controllers(shared) == [(KIND, "first")], "still the first consumer's alone"


def test_a_worker_pod_running_as_the_named_account_passes_the_identity_check(
    api_client: k8s.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    """The Deployment's pods (made by the real controller manager; no kubelet needed: a
    token is bound to a pod object) speak as the named account; a pod of that account
    that is not the consumer's is refused, as under `<name>-worker`."""
    core = k8s.CoreV1Api(api_client)
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer("clicks", "clicks-reader"))
    selector = "streamconsumer.io/consumer=clicks"
    wait_for(
        lambda: bool(core.list_namespaced_pod(namespace, label_selector=selector).items),
        60,
        "a worker pod object",
    )
    pod = core.list_namespaced_pod(namespace, label_selector=selector).items[0]
    assert pod.spec is not None
    assert pod.metadata is not None
    assert pod.spec.service_account_name == "clicks-reader"
    token = bound_token(core, namespace, "clicks-reader", pod)
    answer = heartbeat(operator, namespace, "clicks", str(pod.metadata.name), token)
    # Admitted: the answer is the consumer's (a grant, or 503 while it is loaded or its
    # stream cannot be listed here), not a refusal of who is calling.
    assert answer.status_code not in (401, 403), answer.text

    intruder = core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="intruder"),
            spec=k8s.V1PodSpec(
                service_account_name="clicks-reader",
                containers=[k8s.V1Container(name="c", image="example/clicks:1")],
            ),
        ),
    )
    stolen = bound_token(core, namespace, "clicks-reader", intruder)
    refused = heartbeat(operator, namespace, "clicks", "intruder", stolen)
    assert refused.status_code == 403, refused.text
    assert "intruder is not one of streamconsumer" in refused.json()["message"]


def _says(consumers: StreamConsumers, name: str, words: str) -> bool:
    return words in degraded_message(consumers, name)


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
