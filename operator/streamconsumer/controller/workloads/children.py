"""The objects a StreamConsumer owns: the workers' ServiceAccount, Deployment,
PodDisruptionBudget and, over TLS, the operator's CA certificate. Built as plain
manifests (pure), applied by `main`."""

from __future__ import annotations

from typing import Any

from streamconsumer.controller.names import (
    operator_ca,
    selector_labels,
    worker_deployment,
    worker_service_account,
)
from streamconsumer.models.pod_policy import refused_volume_sources
from streamconsumer.models.resource import (
    CA_DIR,
    CA_FILE,
    CA_VOLUME,
    SCRATCH_DIR,
    SCRATCH_VOLUME,
    TOKEN_DIR,
    TOKEN_VOLUME,
    StreamConsumerSpec,
)
from streamconsumer.sources.factory import source_settings
from streamconsumer.worker.config import WorkerConfig

DRAIN_MARGIN_SECONDS = 5  # the worker's drain ends this long before the pod is killed
WORKER_METRICS_PORT = 9102
# Pod Security Standard `restricted`, set on the container so that a pod-level
# spec.pod.securityContext (runAsUser, fsGroup, ...) still applies alongside it.
RESTRICTED_CONTAINER = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


_NAMED_AT_MOST = 3  # refused sources a message names: a list's length is the tenant's


def pod_policy_refusal(
    spec: StreamConsumerSpec, namespace: str, unrestricted_namespaces: frozenset[str]
) -> str | None:
    """Why no workers may be made for this spec; None if they may. Unrestricted pods
    (docs/security.md#pod-template) are the admins' to allow, per namespace. Without
    them the CRD's volume rules are checked here again: an object admitted before a rule
    existed keeps its field through updates (CRD validation ratcheting)."""
    if spec.pod.unrestricted:
        if namespace in unrestricted_namespaces:
            return None
        return (
            f"spec.pod.unrestricted is not allowed in namespace {namespace}: platform "
            "admins list the namespaces that may run unrestricted workers in the "
            "operator's podPolicy.unrestrictedNamespaces; no worker pods are made"
        )
    if refused := refused_volume_sources(spec.pod.volumes):
        named = ", ".join(f"spec.pod.{path}" for path in refused[:_NAMED_AT_MOST])
        more = len(refused) - _NAMED_AT_MOST
        return (
            f"{named}{f' and {more} more' if more > 0 else ''}: a tenant's workers may not "
            "mount the node's files, storage beyond what the namespace grants, or a "
            "credential of their ServiceAccount (platform admins may allow "
            "spec.pod.unrestricted in a namespace); no worker pods are made"
        )
    return None


def uses_tls(operator_url: str) -> bool:
    return operator_url.startswith("https://")


def autoscaled(spec: StreamConsumerSpec) -> bool:
    """With the lag autoscaler on, the Deployment's replicas are the autoscaler's to set."""
    return spec.autoscaling is not None and spec.autoscaling.enabled


def replicas_of(spec: StreamConsumerSpec, complete: bool) -> dict[str, Any]:
    """The Deployment's replicas as we apply them: none under the lag autoscaler (it
    scales), zero for a Complete consumer, `spec.replicas` otherwise."""
    if complete:
        return {"replicas": 0}
    return {} if autoscaled(spec) else {"replicas": spec.replicas}


def scale_patch(consumer: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": worker_deployment(consumer)},
        "spec": {"replicas": replicas},
    }


def service_account(consumer: str, spec: StreamConsumerSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": worker_service_account(consumer, spec.processor.service_account_name),
            "labels": selector_labels(consumer),
            "annotations": dict(spec.processor.service_account_annotations),
        },
        # Workers never call the Kubernetes API; their token only proves who they are.
        "automountServiceAccountToken": False,
    }


def ca_bundle(consumer: str, ca_pem: bytes) -> dict[str, Any]:
    """The operator's CA certificate for the workers to verify the API (never its key)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": operator_ca(consumer), "labels": selector_labels(consumer)},
        "data": {CA_FILE: ca_pem.decode()},
    }


def deployment(
    namespace: str,
    consumer: str,
    spec: StreamConsumerSpec,
    operator_url: str,
    audience: str,
    complete: bool = False,
) -> dict[str, Any]:
    """`audience`: this operator release's, for the workers' tokens (docs/security.md).
    `complete`: a bounded consumer read to its end, whose workers are scaled to zero."""
    pod = spec.pod
    tls = uses_tls(operator_url)
    config = WorkerConfig.model_validate(  # not WorkerConfig(): that would read our env
        {
            "operator_url": operator_url,
            "namespace": namespace,
            "consumer": consumer,
            "worker_name": "$(POD_NAME)",
            "token_path": f"{TOKEN_DIR}/token",
            "ca_path": f"{CA_DIR}/{CA_FILE}" if tls else None,
            "entrypoint": spec.processor.entrypoint,
            **source_settings(spec.source),
            "max_records": spec.reading.max_records,
            "idle_between_reads_ms": spec.reading.idle_between_reads_ms,
            "prefetch": spec.reading.prefetch,
            "max_reads_per_second": spec.reading.max_reads_per_second,
            "metrics_port": WORKER_METRICS_PORT,
            "drain_seconds": pod.termination_grace_period_seconds - DRAIN_MARGIN_SECONDS,
            "on_failure": spec.processor.on_failure,
            "processor_log_level": spec.processor.log_level,
            "filter": spec.processor.filter,
            "parallelism": spec.processor.parallelism,
            "batch_size": spec.processor.batch_size,
            "processes": spec.processor.processes,
            "max_batching_window_seconds": spec.reading.max_batching_window_seconds,
        }
    )
    # The worker's own settings come last: of two entries of one name the last wins,
    # so even a StreamConsumer applied before the CRD refused reserved names
    # (models/pod_policy.py) cannot point the worker elsewhere.
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *(e.wire() for e in spec.processor.env if e.name != "POD_NAME"),
        *({"name": k, "value": v} for k, v in config.to_env().items()),
    ]
    container: dict[str, Any] = {
        "name": "worker",
        "image": spec.processor.image,
        "command": ["python", "-m", "streamconsumer.worker"],
        "env": env,
        "volumeMounts": [
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
            # The root filesystem is read-only; /tmp is where processors (Spark's scratch,
            # Python's tempfile) may write.
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
            *([{"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True}] if tls else []),
            *pod.volume_mounts,
        ],
        "ports": [{"name": "metrics", "containerPort": WORKER_METRICS_PORT}],
        "securityContext": dict(RESTRICTED_CONTAINER),
    }
    if spec.processor.env_from:
        container["envFrom"] = list(spec.processor.env_from)
    if spec.processor.resources:
        container["resources"] = spec.processor.resources
    labels = selector_labels(consumer)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": worker_deployment(consumer), "labels": labels},
        "spec": {
            **replicas_of(spec, complete),
            "selector": {"matchLabels": labels},
            # Start the new worker before stopping an old one; hand-off does the rest.
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {
                    "labels": {**pod.labels, **labels},
                    **({"annotations": dict(pod.annotations)} if pod.annotations else {}),
                },
                "spec": {
                    **pod_scheduling(spec),
                    "serviceAccountName": worker_service_account(
                        consumer, spec.processor.service_account_name
                    ),
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": pod.termination_grace_period_seconds,
                    "containers": [container],
                    "volumes": [
                        *pod.volumes,
                        {"name": SCRATCH_VOLUME, "emptyDir": {}},
                        *(
                            [{"name": CA_VOLUME, "configMap": {"name": operator_ca(consumer)}}]
                            if tls
                            else []
                        ),
                        {
                            "name": TOKEN_VOLUME,
                            "projected": {
                                "sources": [
                                    {
                                        "serviceAccountToken": {
                                            "audience": audience,
                                            "expirationSeconds": 3600,
                                            "path": "token",
                                        }
                                    }
                                ]
                            },
                        },
                    ],
                },
            },
        },
    }


def pod_scheduling(spec: StreamConsumerSpec) -> dict[str, Any]:
    """The pod-level settings of spec.pod, as a PodSpec spells them (only those set)."""
    pod = spec.pod
    fields = {
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "topologySpreadConstraints": pod.topology_spread_constraints,
        "priorityClassName": pod.priority_class_name,
        "imagePullSecrets": pod.image_pull_secrets,
        "securityContext": pod.security_context,
    }
    return {name: value for name, value in fields.items() if value}


def disruption_budget(consumer: str) -> dict[str, Any]:
    """Voluntary evictions (node drains, cluster upgrades) one worker at a time: each
    evicted worker hands its shards off before the next one goes."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": worker_deployment(consumer), "labels": selector_labels(consumer)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(consumer)}},
    }
