"""The worker Deployment the operator writes: what every worker container gets."""

from __future__ import annotations

from typing import Any

from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.controller.workloads.children import ca_bundle, deployment, service_account
from streamconsumer.models.resource import CA_DIR, CA_FILE
from streamconsumer.worker.config import WorkerConfig
from testbed.specs import consumer_spec

SPEC = consumer_spec(
    source={"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
    processor={"image": "example/clicks:1", "entrypoint": "clicks.processor:Counter"},
)


def pod_of(manifest: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def test_a_worker_writes_only_to_its_scratch_directory() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "http://operator:8080", AUDIENCE))
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]] == {"name": "scratch", "emptyDir": {}}, "Spark's scratch"


def test_a_worker_gets_a_pod_bound_token_for_the_operator_and_drains_in_time() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "http://operator:8080", AUDIENCE))
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (token,) = [v for v in pod["volumes"] if "projected" in v]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == AUDIENCE
    drain = float(env[WorkerConfig.env_name("drain_seconds")])
    assert drain < pod["terminationGracePeriodSeconds"] == 30


def test_over_https_a_worker_verifies_the_operator_with_its_ca_bundle() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "https://10.96.0.12:8080", AUDIENCE))
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ca_path = env[WorkerConfig.env_name("ca_path")]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = mounts[CA_DIR]
    assert ca_path == f"{CA_DIR}/{CA_FILE}"
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mount["name"]]["configMap"] == {"name": "clicks-operator-ca"}
    bundle = ca_bundle("clicks", b"-----BEGIN CERTIFICATE-----\n")
    assert bundle["metadata"]["name"] == "clicks-operator-ca"
    assert set(bundle["data"]) == {CA_FILE}, "the CA certificate only, never a key"


def test_over_plain_http_there_is_no_ca_bundle() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "http://127.0.0.1:8080", AUDIENCE))
    (container,) = pod["containers"]
    assert WorkerConfig.env_name("ca_path") not in {e["name"] for e in container["env"]}
    assert all("configMap" not in v for v in pod["volumes"])


def test_a_worker_container_meets_pod_security_restricted_with_a_users_pod_context() -> None:
    spec = SPEC.model_copy(deep=True)
    spec.pod.security_context = {"runAsUser": 20000, "fsGroup": 20000}
    pod = pod_of(deployment("ns", "clicks", spec, "https://operator:8080", AUDIENCE))
    (container,) = pod["containers"]
    assert pod["securityContext"] == {"runAsUser": 20000, "fsGroup": 20000}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_the_workers_run_as_the_serviceaccount_the_spec_names() -> None:
    """processor.serviceAccountName names the account the operator makes (with the
    spec's annotations) and runs the workers as; `<name>-worker` without it."""
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/clicks"}
    named = consumer_spec(
        source={"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
        processor={
            "image": "example/clicks:1",
            "entrypoint": "clicks.processor:Counter",
            "serviceAccountName": "clicks-reader",
            "serviceAccountAnnotations": role,
        },
    )
    account = service_account("clicks", named)
    assert account["metadata"]["name"] == "clicks-reader"
    assert account["metadata"]["annotations"] == role
    pod = pod_of(deployment("ns", "clicks", named, "http://operator:8080", AUDIENCE))
    assert pod["serviceAccountName"] == "clicks-reader"
    assert service_account("clicks", SPEC)["metadata"]["name"] == "clicks-worker"
    assert (
        pod_of(deployment("ns", "clicks", SPEC, "http://o:8080", AUDIENCE))["serviceAccountName"]
        == "clicks-worker"
    )
