"""The worker Deployment the operator writes: what every worker container gets."""

from __future__ import annotations

from typing import Any

from streamconsumer.controller.auth import AUDIENCE
from streamconsumer.controller.children import deployment
from streamconsumer.models.resource import StreamConsumerSpec
from streamconsumer.worker.config import WorkerConfig

SPEC = StreamConsumerSpec.model_validate(
    {
        "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
        "processor": {"image": "example/clicks:1", "entrypoint": "clicks.processor:Counter"},
    }
)


def pod_of(manifest: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def test_a_worker_writes_only_to_its_scratch_directory() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "http://operator:8080"))
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]] == {"name": "scratch", "emptyDir": {}}, "Spark's scratch"


def test_a_worker_gets_a_pod_bound_token_for_the_operator_and_drains_in_time() -> None:
    pod = pod_of(deployment("ns", "clicks", SPEC, "http://operator:8080"))
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (token,) = [v for v in pod["volumes"] if "projected" in v]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == AUDIENCE
    drain = float(env[WorkerConfig.env_name("drain_seconds")])
    assert drain < pod["terminationGracePeriodSeconds"] == 30
