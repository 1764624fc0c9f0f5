"""A consumer's configuration for tests, built in one place: the StreamConsumer (its
manifest, its spec as the operator reads it) and the settings a worker reads."""

from __future__ import annotations

from typing import Any

from streamconsumer.controller.aws.access import AccessPolicy, AwsAccess
from streamconsumer.models.resource import API_VERSION, KIND, StreamConsumerSpec
from streamconsumer.worker.config import WorkerConfig

# Test beds reach their emulators over plain HTTP, on loopback or a namespace's address,
# any stream from any namespace: allowed by name, since none is by default.
TEST_BED_ACCESS = AccessPolicy(
    default=AwsAccess(streams=("*", "arn:*"), endpoints=("*",), allow_http=True)
)


def consumer_spec(*, lease_seconds: float | None = None, **fields: Any) -> StreamConsumerSpec:
    """A valid spec: Kinesis stream "s" read by processor "m:f" unless `fields` (spec
    fields by their API names: source=..., processor=..., initialPosition=...) say
    otherwise; leases of `lease_seconds` where given, else the default."""
    body: dict[str, Any] = {
        "source": {"kinesis": {"streamName": "s"}},
        "processor": {"image": "i", "entrypoint": "m:f"},
    }
    if lease_seconds is not None:
        body["leases"] = {"durationSeconds": lease_seconds}
    return StreamConsumerSpec.model_validate(body | fields)


def consumer_manifest(
    name: str = "clicks",
    *,
    image: str = "example/clicks:1",
    entrypoint: str = "clicks:Processor",
    metadata: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A StreamConsumer as `kubectl apply` takes it: Kinesis stream "clicks" in
    eu-west-1 read by `image`'s `entrypoint`, unless `spec` (by API names: source=...)
    says otherwise; `metadata` beside its name."""
    body: dict[str, Any] = {
        "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
        "processor": {"image": image, "entrypoint": entrypoint},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, **(metadata or {})},
        "spec": body | spec,
    }


def worker_config(**fields: Any) -> WorkerConfig:
    """A valid worker configuration: worker w of consumer n/c, processor "m:f", unless
    `fields` (by their Python names: consumer=..., stream_name=...) say otherwise."""
    defaults = {
        "operator_url": "http://op",
        "namespace": "n",
        "consumer": "c",
        "worker_name": "w",
        "token_path": "/t",
        "entrypoint": "m:f",
    }
    return WorkerConfig.model_validate(defaults | fields)
