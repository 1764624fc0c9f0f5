"""Who is calling the worker API, as `auth` found it out: a value the sans-I/O answers
(`answers`) judge requests by, without the Kubernetes client that reviewed the token."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    namespace: str
    service_account: str
    pod_name: str | None
    pod_uid: str | None = None
    # The StreamConsumer whose workers' Deployment controls the pod; None if none does.
    consumer: str | None = None
    # The ServiceAccount that StreamConsumer's workers run as (its spec, read with it).
    consumer_account: str | None = None
