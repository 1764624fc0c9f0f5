"""kopf handlers — thin by design: each hands over to a domain module. What they share
(settings, the Kubernetes client, the registry of consumers the worker API serves, whether
this replica leads) is put in kopf's `memo` by the process entry point, `__main__.py`,
which runs kopf only on the elected leader:

python -m streamconsumer.controller --all-namespaces
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from pydantic import ValidationError

from streamconsumer.controller import children, fanout
from streamconsumer.controller.autoscaler import Autoscaler
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.loop import ConsumerLoop, Event, LoopSettings
from streamconsumer.controller.registry import ManagedConsumer, Registry
from streamconsumer.controller.runner import run_consumer
from streamconsumer.controller.state import Coordinator, creation_time, durable_from_status
from streamconsumer.controller.status import KubeStatusApi, StatusWriter
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.resource import (
    RESET_ANNOTATION,
    ResetRequest,
    StreamConsumerSpec,
)
from streamconsumer.sources.factory import make_source

FIELD_MANAGER = "streamconsumer-operator"
AUTOSCALER_FIELD_MANAGER = "streamconsumer-autoscaler"


def spec_of(body: kopf.Body) -> StreamConsumerSpec:
    return StreamConsumerSpec.model_validate(body.get("spec", {}))


def kube_client() -> k8s.ApiClient:
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
    return k8s.ApiClient()


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: status belongs to the lease table.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.INFO


@kopf.on.cleanup()
async def stop_serving(memo: kopf.Memo, **_: Any) -> None:
    """A stopping operator serves workers no more: they retry, and reach the next leader."""
    await memo.stop_serving()


def _apply(api_client: k8s.ApiClient, manifest: dict[str, Any], namespace: str) -> None:
    """Server-side apply: idempotent create-or-update in one call."""
    name = manifest["metadata"]["name"]
    kwargs: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "_content_type": "application/apply-patch+yaml",
    }
    if manifest["kind"] == "Deployment":
        k8s.AppsV1Api(api_client).patch_namespaced_deployment(name, namespace, manifest, **kwargs)
    elif manifest["kind"] == "ConfigMap":
        k8s.CoreV1Api(api_client).patch_namespaced_config_map(name, namespace, manifest, **kwargs)
    elif manifest["kind"] == "PodDisruptionBudget":
        k8s.PolicyV1Api(api_client).patch_namespaced_pod_disruption_budget(
            name, namespace, manifest, **kwargs
        )
    else:
        k8s.CoreV1Api(api_client).patch_namespaced_service_account(
            name, namespace, manifest, **kwargs
        )


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile_children(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    spec = spec_of(body)
    manifests = [
        children.service_account(name, spec),
        # The CA before the Deployment: its pods mount it.
        *([children.ca_bundle(name, memo.tls.ca_pem)] if memo.tls is not None else []),
        children.deployment(namespace, name, spec, memo.config.api_url),
        children.disruption_budget(name),
    ]
    for manifest in manifests:
        kopf.adopt(manifest, owner=body)
        await asyncio.to_thread(_apply, memo.api_client, manifest, namespace)
    consumer = memo.registry.get(namespace, name)
    if consumer is not None:
        consumer.coordinator.update_spec(spec)
        consumer.wake()
    logger.info("workers: %s replicas of %s", spec.replicas, spec.processor.image)


def _fan_out(body: kopf.Body, **_: Any) -> bool:
    return fanout.uses_fan_out(spec_of(body).source)


# Enhanced fan-out: a stream consumer while the resource exists and says fanOut. Every
# StreamConsumer carries kopf's finalizer anyway (for the `consume` daemon); the delete
# handler runs only for fanOut ones, and a switch to polling deregisters at once.
@kopf.on.resume(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
@kopf.on.create(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
async def register_stream_consumer(
    body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    arn = await fanout.register(namespace, name, spec_of(body).source)
    logger.info("enhanced fan-out through stream consumer %s", arn)


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.source", backoff=5.0)
async def stream_consumer_changed(
    old: Any, new: Any, name: str, namespace: str | None, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    await fanout.consumer_changed(namespace, name, old or {}, new or {})


@kopf.on.delete(GROUP, VERSION, PLURAL, when=_fan_out, backoff=5.0)
async def deregister_stream_consumer(
    body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    await fanout.deregister(namespace, name, spec_of(body).source)
    logger.info("stream consumer deregistered")


@kopf.on.field(GROUP, VERSION, PLURAL, field=("metadata", "annotations", RESET_ANNOTATION))
async def reset_requested(
    body: kopf.Body, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    consumer = memo.registry.get(namespace, name)
    if consumer is not None:
        _request_reset(body, consumer.coordinator)
        consumer.wake()


def _request_reset(body: kopf.Body, coordinator: Coordinator) -> None:
    try:
        request = ResetRequest.on(body)
    except ValidationError as error:
        kopf.warn(body, reason="ResetInvalid", message=f"{RESET_ANNOTATION}: {error}")
        return
    if request is not None:
        coordinator.request_reset(request)


# A loop that fails restarts after 2 s (kopf defaults to 60 s), from the persisted status;
# it is built not to fail (errors are retried in place and shown as conditions).
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0, backoff=2.0)
async def consume(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    registry: Registry = memo.registry
    config: OperatorConfig = memo.config
    registry.loading(namespace, name)
    status_api = KubeStatusApi(memo.api_client, namespace, name)
    current = await asyncio.to_thread(status_api.get)
    writer = StatusWriter(status_api, namespace, name)
    writer.adopt(current)
    spec = spec_of(body)
    status = current.get("status") or {}
    coordinator = Coordinator(
        spec, durable_from_status(status), time.monotonic(), created=creation_time(current)
    )
    consumer = ManagedConsumer(namespace, name, coordinator)
    _request_reset(body, coordinator)  # one asked for while the operator was away
    # After a restart, carry on from what the autoscaler last asked for.
    desired = status.get("desiredReplicas")
    coordinator.desired_replicas = desired
    loop = ConsumerLoop(
        name,
        coordinator,
        LoopSettings(
            shard_sync_seconds=config.shard_sync_seconds,
            status_interval_seconds=config.status_interval_seconds,
        ),
        generation=lambda: body.get("metadata", {}).get("generation"),
        autoscaler=Autoscaler(desired if desired is not None else spec.replicas),
    )

    def scale(replicas: int) -> None:
        patch = children.scale_patch(name, replicas)
        k8s.AppsV1Api(memo.api_client).patch_namespaced_deployment(
            patch["metadata"]["name"],
            namespace,
            patch,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    def emit(event: Event) -> None:
        post = kopf.warn if event.type == "Warning" else kopf.info
        post(body, reason=event.reason, message=event.message)

    registry.add(consumer)
    try:
        await run_consumer(
            consumer,
            loop,
            make_source,
            writer,
            config,
            emit,
            # A leader whose term ran out stops at once, before kopf winds down.
            stopped=lambda: bool(stopped) or not memo.leading(),
            scale=scale,
        )
    finally:
        registry.remove(namespace, name)
        # A stopping leader frees the Lease once no consumer loop can write any more,
        # not after kopf has wound down (it waits 5 s for tasks it did not start).
        exiting = stopped.reason is not None and bool(
            stopped.reason & kopf.DaemonStoppingReason.OPERATOR_EXITING
        )
        if exiting and registry.idle():
            await memo.step_down()
