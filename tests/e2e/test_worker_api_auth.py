"""The worker API trusts only pod-bound tokens of the consumer's own workers, each
speaking for itself; bad input is a 4xx with a message, never a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
from kubernetes import client as k8s

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.models.api import WIRE_VERSION, WIRE_VERSION_HEADER
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def token_for(
    api: k8s.ApiClient,
    namespace: str,
    account: str,
    audience: str = AUDIENCE,
    pod: k8s.V1Pod | None = None,
) -> str:
    """A token of `account`, bound to `pod` if given (as a kubelet mints them)."""
    core = k8s.CoreV1Api(api)
    bound = None
    if pod is not None and pod.metadata is not None:
        bound = k8s.V1BoundObjectReference(
            kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
        )
    spec = k8s.V1TokenRequestSpec(audiences=[audience], bound_object_ref=bound)
    request = k8s.AuthenticationV1TokenRequest(spec=spec)
    status = core.create_namespaced_service_account_token(account, namespace, request).status
    assert status is not None
    assert status.token is not None
    return status.token


def test_forged_and_malformed_calls_are_refused(scenario: Scenario) -> None:
    scenario.start(shards=2, replicas=1)
    wait_for(lambda: sum(scenario.owners().values()) == 2, 60, "both shards owned")
    assert scenario.operator is not None
    leases = scenario.status()["leases"]
    shard, lease = sorted(leases.items())[0]
    worker, epoch = lease["owner"], lease["epoch"]
    pod_token = (
        Path(scenario.workdir) / "pods" / worker / "streamconsumer-token" / "token"
    ).read_text()
    api, namespace = scenario.api_client, scenario.namespace
    k8s.CoreV1Api(api).create_namespaced_service_account(
        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="other-worker"))
    )
    base = f"{scenario.operator.url}/v1/namespaces/{namespace}/streamconsumers/{scenario.name}"
    # Issue 24: any pod running as the workers' ServiceAccount could take shards. This one
    # is nobody's (never scheduled: a pod object is all a token needs to be bound to).
    intruder = k8s.CoreV1Api(api).create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="intruder"),
            spec=k8s.V1PodSpec(
                service_account_name=f"{scenario.name}-worker",
                node_name="nowhere",
                containers=[k8s.V1Container(name="c", image="example/intruder:1")],
            ),
        ),
    )
    intruder_token = token_for(api, namespace, f"{scenario.name}-worker", pod=intruder)

    def checkpoint(
        token: str | None, headers: dict[str, str] | None = None, **body: object
    ) -> httpx.Response:
        payload = {
            "worker": worker,
            "shardId": shard,
            "epoch": epoch,
            "sequenceNumber": "1",
            **body,
        }
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(
            f"{base}/checkpoint", json=payload, headers=auth | (headers or {}), timeout=10
        )

    def shard_end_on_an_open_shard() -> httpx.Response:
        """Deferred first (503: the last listing may predate a reshard; one is asked
        for), refused once a listing started after it still shows the shard open."""
        first = checkpoint(pod_token, sequenceNumber="SHARD_END")
        assert first.status_code == 503, (first.status_code, first.text)
        assert first.headers.get("Retry-After")
        answers: list[httpx.Response] = []

        def refused() -> bool:
            answers.append(checkpoint(pod_token, sequenceNumber="SHARD_END"))
            return answers[-1].status_code != 503

        wait_for(refused, 30, "a listing newer than the SHARD_END")
        return answers[-1]

    cases = {
        "no token": (checkpoint(None), 401),
        "not a token": (checkpoint("not-a-token"), 401),
        "another audience": (
            checkpoint(token_for(api, namespace, f"{scenario.name}-worker", "x")),
            401,
        ),
        "another consumer's worker": (checkpoint(token_for(api, namespace, "other-worker")), 403),
        "not bound to a pod": (
            checkpoint(token_for(api, namespace, f"{scenario.name}-worker")),
            403,
        ),
        "speaks for another worker": (checkpoint(pod_token, worker="someone-else"), 403),
        "speaks for another pod's process": (
            checkpoint(pod_token, worker="someone-else#0"),
            403,
        ),
        "speaks for a process of the real worker's pod": (
            checkpoint(intruder_token, worker=f"{worker}#0"),
            403,
        ),
        # Its own process (processor.processes) may speak; this one holds no lease.
        "a process of its own pod": (checkpoint(pod_token, worker=f"{worker}#0"), 409),
        "a pod that is not one of the workers": (
            checkpoint(intruder_token, worker="intruder"),
            403,
        ),
        "malformed": (checkpoint(pod_token, sequenceNumber="12abc"), 400),
        "a wire version not served": (checkpoint(pod_token, {WIRE_VERSION_HEADER: "0"}), 400),
        "larger than any checkpoint": (checkpoint(pod_token, padding="x" * 5000), 413),
        "SHARD_END on an open shard": (shard_end_on_an_open_shard(), 400),
        "stale epoch": (checkpoint(pod_token, epoch=epoch + 5), 409),
        "unknown shard": (checkpoint(pod_token, shardId="shardId-999"), 400),
    }
    for case, (response, expected) in cases.items():
        assert response.status_code == expected, (case, response.status_code, response.text)
        body = response.json()
        assert body["message"], case
        assert response.headers[WIRE_VERSION_HEADER] == str(WIRE_VERSION), case
        assert "Traceback" not in response.text
    garbage = httpx.post(
        f"{base}/heartbeat",
        content=b"{not json",
        headers={"Authorization": f"Bearer {pod_token}"},
        timeout=10,
    )
    assert garbage.status_code == 400, garbage.text
    assert scenario.status()["leases"][shard]["epoch"] == epoch, "nothing forged got through"

    # The real worker's own token, speaking for itself: accepted. With wait=true the answer
    # comes once the checkpoint is in the status (here: the lease released at once).
    released = checkpoint(pod_token, sequenceNumber=None, release=True, wait=True)
    assert released.status_code == 200, released.text
    assert released.json()["persisted"] is True
    after = scenario.status()["leases"][shard]
    # Released in the status — or already granted again, under a new epoch.
    assert after.get("owner") is None or after["epoch"] > epoch, after
