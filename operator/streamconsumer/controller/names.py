"""The names and labels of the objects the operator makes for a StreamConsumer, in one
place."""

from __future__ import annotations

from streamconsumer.models.resource import CONSUMER_LABEL, NAME_LABEL

WORKER_APP = "streamconsumer-worker"  # the workers' app.kubernetes.io/name


def worker_service_account(consumer: str, named: str | None = None) -> str:
    """The workers' ServiceAccount: the spec's `processor.serviceAccountName` if it
    `named` one, else `<consumer>-worker`. Either way the operator creates and owns it."""
    return named or f"{consumer}-worker"


def worker_deployment(consumer: str) -> str:
    return f"{consumer}-workers"


def operator_ca(consumer: str) -> str:
    """The ConfigMap holding the operator's CA certificate for this consumer's workers."""
    return f"{consumer}-operator-ca"


def kept_checkpoints(consumer: str) -> str:
    """The ConfigMap that keeps a deleted consumer's lease table (controller/leases/kept.py)."""
    return f"{consumer}-checkpoints"


def selector_labels(consumer: str) -> dict[str, str]:
    return {CONSUMER_LABEL: consumer, NAME_LABEL: WORKER_APP}


def label_selector(consumer: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(consumer).items()))
