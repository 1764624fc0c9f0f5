"""kopf entry point — thin by design: each handler hands over to a domain module.

kopf run -m streamconsumer.controller.main --all-namespaces
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf
from aiohttp import web
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from streamconsumer.controller import children
from streamconsumer.controller.api import WorkerApi
from streamconsumer.controller.auth import TokenReviewer
from streamconsumer.controller.autoscaler import Autoscaler
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.loop import run_consumer, spec_of
from streamconsumer.controller.registry import ManagedConsumer, Registry
from streamconsumer.controller.state import Coordinator, leases_from_status
from streamconsumer.controller.status import StatusWriter
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.sources.kinesis import KinesisSource, StreamRef, kinesis_client

FIELD_MANAGER = "streamconsumer-operator"
AUTOSCALER_FIELD_MANAGER = "streamconsumer-autoscaler"
registry = Registry()
config = OperatorConfig.from_env()
_state: dict[str, Any] = {}


def kube() -> k8s.ApiClient:
    client = _state.get("api_client")
    if client is None:
        try:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
        client = _state["api_client"] = k8s.ApiClient()
    assert isinstance(client, k8s.ApiClient)
    return client


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: status belongs to the lease table.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.INFO
    api = WorkerApi(registry, TokenReviewer(kube()), time.monotonic)
    runner = web.AppRunner(api.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, config.api_host, config.api_port).start()
    _state["runner"] = runner


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    runner = _state.pop("runner", None)
    if runner is not None:
        await runner.cleanup()


def _apply(manifest: dict[str, Any], namespace: str) -> None:
    """Server-side apply: idempotent create-or-update in one call."""
    name = manifest["metadata"]["name"]
    kwargs: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "_content_type": "application/apply-patch+yaml",
    }
    if manifest["kind"] == "Deployment":
        k8s.AppsV1Api(kube()).patch_namespaced_deployment(name, namespace, manifest, **kwargs)
    else:
        k8s.CoreV1Api(kube()).patch_namespaced_service_account(name, namespace, manifest, **kwargs)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile_children(
    body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    spec = spec_of(body)
    manifests = [
        children.service_account(name, spec),
        children.deployment(namespace, name, spec, config.api_url),
    ]
    for manifest in manifests:
        kopf.adopt(manifest, owner=body)
        await asyncio.to_thread(_apply, manifest, namespace)
    consumer = registry.get(namespace, name)
    if consumer is not None:
        consumer.coordinator.spec = spec
        consumer.wake()
    logger.info("workers: %s replicas of %s", spec.replicas, spec.processor.image)


# A failed loop restarts after 2 s (kopf defaults to 60 s), from the persisted status.
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0, backoff=2.0)
async def consume(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None, "StreamConsumer is namespaced"
    spec = spec_of(body)
    current = await asyncio.to_thread(
        k8s.CustomObjectsApi(kube()).get_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
    )
    assert isinstance(current, dict)
    writer = StatusWriter(kube(), namespace, name)
    writer.adopt(current)
    coordinator = Coordinator(spec, leases_from_status(current.get("status")), time.monotonic())
    consumer = ManagedConsumer(namespace, name, coordinator)
    registry.add(consumer)
    kinesis = spec.source.kinesis
    source = KinesisSource(
        kinesis_client(kinesis.region, kinesis.endpoint_url),
        StreamRef(name=kinesis.stream_name, arn=kinesis.stream_arn),
    )

    def scale(replicas: int) -> None:
        patch = children.scale_patch(name, replicas)
        k8s.AppsV1Api(kube()).patch_namespaced_deployment(
            patch["metadata"]["name"],
            namespace,
            patch,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    # After a restart, carry on from what the autoscaler last asked for.
    desired = (current.get("status") or {}).get("desiredReplicas")
    autoscaler = Autoscaler(desired if desired is not None else spec.replicas, scale)
    coordinator.desired_replicas = desired

    def emit(kind: str, reason: str, message: str) -> None:
        if kind == "Warning":
            kopf.warn(body, reason=reason, message=message)
        else:
            kopf.info(body, reason=reason, message=message)

    try:
        await run_consumer(
            consumer,
            source,
            writer,
            config,
            generation=lambda: body.get("metadata", {}).get("generation"),
            emit=emit,
            stopped=lambda: bool(stopped),
            autoscaler=autoscaler,
        )
    finally:
        registry.remove(namespace, name)
