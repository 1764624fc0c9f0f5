"""What runs for one StreamConsumer while this replica leads: load it from the object
(a new term), fence its status, drive it until kopf stops the daemon, the term ends, or
a newer term fences the status (docs/design.md#operator-lifecycle)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes import client as k8s

from streamconsumer.controller import children, executors
from streamconsumer.controller.access import guarded
from streamconsumer.controller.context import OperatorContext
from streamconsumer.controller.driver import ConsumerDriver, Timeouts, load
from streamconsumer.controller.jobs import ThreadJobs
from streamconsumer.controller.loop import Event, LoopSettings
from streamconsumer.controller.owned import KUBERNETES_TIMEOUT_SECONDS, NotOurs, controlled_by
from streamconsumer.controller.registry import ManagedConsumer
from streamconsumer.controller.runner import run_consumer
from streamconsumer.controller.status import KubeStatusApi, StatusWriter
from streamconsumer.sources.factory import make_source

AUTOSCALER_FIELD_MANAGER = "streamconsumer-autoscaler"


async def consume(
    context: OperatorContext,
    body: kopf.Body,
    namespace: str,
    name: str,
    stopped: Callable[[], bool],
) -> None:
    config, registry = context.config, context.registry
    registry.loading(namespace, name)
    try:
        status_api = KubeStatusApi(context.api_client, namespace, name)
        current = await executors.run_in(executors.KUBERNETES, status_api.get)
        writer = StatusWriter(status_api, namespace, name, holder=context.holder)
        loop = load(
            current,
            writer,
            LoopSettings(
                shard_sync_seconds=config.shard_sync_seconds,
                status_interval_seconds=config.status_interval_seconds,
            ),
            time.monotonic(),
            generation=lambda: body.get("metadata", {}).get("generation"),
        )
        consumer = ManagedConsumer(namespace, name, loop, owner=body)
        jobs = ThreadJobs(executors.CONSUMERS, consumer.wake)
        driver = ConsumerDriver(
            namespace,
            name,
            loop,
            guarded(config.aws_access, namespace, make_source),
            writer,
            jobs,
            time.monotonic,
            functools.partial(_emit, body),
            Timeouts(
                listing=config.shard_sync_timeout_seconds,
                status_write=config.status_write_timeout_seconds,
                scale=KUBERNETES_TIMEOUT_SECONDS,
            ),
            scale=functools.partial(_scale, context.api_client, namespace, name, body.metadata.uid),
            saved=lambda: consumer.notify_persisted(),
        )
        registry.add(consumer)
        # A replica whose term ended stops at once, before kopf winds down.
        await run_consumer(consumer, driver, jobs, lambda: stopped() or not context.leading())
        if driver.deposed:
            context.deposed(f"{namespace}/{name}: {driver.loop.deposed}")
    finally:
        registry.remove(namespace, name)


def _emit(body: kopf.Body, event: Event) -> None:
    post = kopf.warn if event.type == "Warning" else kopf.info
    post(body, reason=event.reason, message=event.message)


def _scale(
    api_client: k8s.ApiClient, namespace: str, name: str, owner_uid: str, replicas: int
) -> None:
    """Sets the workers' Deployment's replicas: only ours (docs/security.md#ownership),
    read first and its uid sent with the apply, as `apply_owned` does; raises NotOurs."""
    apps = k8s.AppsV1Api(api_client)
    patch: Any = children.scale_patch(name, replicas)
    deployment = patch["metadata"]["name"]
    existing = apps.read_namespaced_deployment(
        deployment, namespace, _request_timeout=KUBERNETES_TIMEOUT_SECONDS
    ).metadata
    if existing is None or not controlled_by(existing.owner_references, owner_uid):
        raise NotOurs("Deployment", deployment)
    patch["metadata"]["uid"] = existing.uid  # replaced meanwhile: 409, not applied
    apps.patch_namespaced_deployment(
        deployment,
        namespace,
        patch,
        field_manager=AUTOSCALER_FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
