"""What the kopf handlers hand over to: the consumer's children applied (and refused where
the pod policy says so), and the workers' health read from their pods and Deployment."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors
from streamconsumer.controller.context import OperatorContext
from streamconsumer.controller.leases.render import said_complete
from streamconsumer.controller.names import worker_deployment
from streamconsumer.controller.workloads import children, worker_health
from streamconsumer.controller.workloads.owned import (
    NotApplied,
    NotOurs,
    apply_owned,
    delete_owned,
    failure,
    read_owned,
)
from streamconsumer.models.resource import CONSUMER_LABEL, StreamConsumerSpec

# An object of a name we need that is not ours: looked at again this often.
CONFLICT_RETRY_SECONDS = 10.0


def generation(body: kopf.Body) -> int:
    return int(body.get("metadata", {}).get("generation") or 0)


def spec_of(body: kopf.Body) -> StreamConsumerSpec:
    return StreamConsumerSpec.model_validate(body.get("spec", {}))


async def apply_children(
    context: OperatorContext, body: kopf.Body, name: str, namespace: str, logger: kopf.Logger
) -> None:
    """Applies the consumer's workers and what they need (ServiceAccount, CA bundle,
    Deployment, PodDisruptionBudget), as ours; tells the loop the new spec."""
    spec = spec_of(body)

    def applied(error: str | None) -> None:  # shown in status
        context.registry.children_applied(namespace, name, error)

    refusal = children.pod_policy_refusal(
        spec, namespace, context.config.unrestricted_pod_namespaces
    )
    if refusal is not None:
        kopf.warn(body, reason="PodPolicyRefused", message=refusal)
        applied(refusal)
        context.registry.spec_refused(namespace, name, generation(body))
        # Workers made before (the namespace was allowed then, or the spec was another)
        # would go on making pods of it: no worker pod of a refused spec may run.
        stop = functools.partial(
            delete_owned,
            context.api_client,
            "Deployment",
            worker_deployment(name),
            namespace,
            body.metadata.uid,
        )
        if await executors.run_in(executors.KUBERNETES, stop):
            logger.warning("workers deleted: %s", refusal)
        # Again later: the loop may not be registered yet to show it in Degraded.
        raise kopf.TemporaryError(refusal, delay=CONFLICT_RETRY_SECONDS)
    ca_pem = context.tls.ca_pem if context.tls is not None else None
    ca = children.ca_bundle(name, ca_pem) if ca_pem is not None else None
    manifests = [
        children.service_account(name, spec),
        *([ca] if ca is not None else []),  # the CA before the Deployment: its pods mount it
        children.deployment(
            namespace,
            name,
            spec,
            context.config.api_url,
            context.config.token_audience,
            complete=_complete(context, body, namespace, name),
        ),
        children.disruption_budget(name),
    ]
    try:
        for manifest in manifests:
            if not context.leading():
                # The term ended on the way (frozen in an earlier apply, resumed after a
                # takeover): the new leader applies what it reads, maybe a newer spec.
                logger.info("not applying the workers' objects: this replica leads no more")
                return
            kopf.adopt(manifest, owner=body)
            apply = functools.partial(
                apply_owned, context.api_client, manifest, namespace, body.metadata.uid
            )
            await executors.run_in(executors.KUBERNETES, apply)
            if manifest is ca and ca_pem is not None:
                context.ca_bundles.applied((namespace, name), ca_pem)
    except (NotOurs, NotApplied) as refused:
        reason = "ObjectConflict" if isinstance(refused, NotOurs) else "ChildrenRefused"
        kopf.warn(body, reason=reason, message=str(refused))
        applied(str(refused))
        context.registry.spec_refused(namespace, name, generation(body))
        raise kopf.TemporaryError(str(refused), delay=CONFLICT_RETRY_SECONDS) from None
    except Exception as error:  # passing (kopf tries again), but nothing is known applied
        context.registry.children_failed(namespace, name, failure(error))
        raise
    if (consumer := context.registry.get(namespace, name)) is not None:
        consumer.coordinator.update_spec(spec)
    applied(None)
    context.registry.spec_applied(namespace, name, generation(body))
    logger.info("workers: %s replicas of %s", spec.replicas, spec.processor.image)
    # Observed as soon as a read finds the workers running it (a spec the Deployment does
    # not see: at once); otherwise the `check_workers` timer reads again until they do.
    await check_workers(context, body, name, namespace, now=True)


def _complete(context: OperatorContext, body: kopf.Body, namespace: str, name: str) -> bool:
    """Is the consumer a bounded one read to its end (its workers stay at zero)? Its
    loop knows; before it is loaded (a restart), the status it saved says."""
    consumer = context.registry.get(namespace, name)
    if consumer is not None:
        return consumer.coordinator.completed
    return spec_of(body).end is not None and said_complete(body.get("status") or {})


async def check_workers(
    context: OperatorContext, body: kopf.Body, name: str, namespace: str, now: bool = False
) -> None:
    """The Deployment's own word on its pods (a ReplicaSet refused by a quota or an
    admission policy makes no pod for the pod watch to see), when a read is due (`now`:
    at once)."""
    if body.metadata.get("deletionTimestamp"):
        return  # its workers are going: nothing of it is kept (Registry.forget)
    if not context.registry.deployment_read_due(namespace, name, force=now):
        return
    read = functools.partial(
        read_owned,
        context.api_client,
        "Deployment",
        worker_deployment(name),
        namespace,
        body.metadata.uid,
    )
    read_at = context.registry.now()
    try:
        deployment = await executors.run_in(executors.KUBERNETES, read)
    except (ApiException, HTTPError, OSError):
        return  # a passing fault: the last reading stands until the next one
    if deployment is not None:
        context.registry.deployment_seen(
            namespace, name, worker_health.deployment_replicas(deployment), read_at
        )


def worker_pod_changed(context: OperatorContext, kind: str | None, pod: Mapping[str, Any]) -> None:
    """A deleted worker pod's tokens are refused at once, not when their cache runs out; a
    pod that does not start shows in its consumer's status."""
    metadata = pod.get("metadata") or {}
    uid = str(metadata.get("uid") or "")
    consumer = (metadata.get("labels") or {}).get(CONSUMER_LABEL)
    namespace = metadata.get("namespace")
    if kind == "DELETED":
        context.reviewer.forget_pod(uid)
        if consumer and namespace:
            context.registry.pod_gone(namespace, consumer, uid)
    elif consumer and namespace and uid:
        context.registry.pod_seen(namespace, consumer, uid, worker_health.pod_trouble(pod))
