"""The operator's own settings, from STREAMCONSUMER_* environment variables."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamconsumer.controller.aws.access import AccessPolicy
from streamconsumer.controller.leases.lease_groups import (
    GROUP_COUNT,
    INLINE_MAX_SHARDS,
    MAX_GROUPS,
    Layout,
)
from streamconsumer.controller.leases.lease_log import SHARDS_PER_LOG_GROUP
from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.core.election import ElectionTiming

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        return "streamconsumer-system"  # outside a cluster (local development)


class OperatorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STREAMCONSUMER_", frozen=True)

    api_host: str = "0.0.0.0"
    api_port: int = Field(default=8080, ge=1, le=65535)
    # Prometheus' /metrics, plain HTTP on its own port (on api_host); 0 serves none.
    metrics_port: int = Field(default=9090, ge=0, le=65535)
    # How workers reach the API (the operator's Service in a cluster). https:// serves
    # TLS (the chart's default); http:// is for local development and tests only.
    api_url: str = Field(
        default="https://streamconsumer-operator.streamconsumer-system.svc:8080",
        pattern=r"^https?://",
    )
    # Where the operator runs (its Lease and CA Secret live here) and its Service, whose DNS names
    # the serving certificate covers.
    namespace: str = Field(default_factory=_own_namespace)
    service_name: str = "streamconsumer-operator"
    # The operator's own CA (created if absent); its key never leaves this namespace.
    tls_ca_secret: str = "streamconsumer-operator-ca"
    # Its certificate (never the key) as a ConfigMap here, for the ServiceMonitor to trust.
    tls_ca_bundle: str = "streamconsumer-operator-ca-bundle"
    # More names for the serving certificate (the chart adds the Service's cluster IP).
    tls_sans: list[str] = Field(default_factory=list)
    # cert-manager's Secret mounted here (tls.crt, tls.key, ca.crt): no CA of our own.
    tls_cert_dir: str | None = None
    # How often the serving certificate is renewed if due (or reloaded from tls_cert_dir)
    # and the CA certificate re-published where it changed.
    tls_refresh_seconds: float = Field(default=300.0, gt=0)
    # The workers' tokens are meant for this audience only: one per operator release, so a
    # token minted for another release's workers is refused here (the chart sets it).
    token_audience: str = Field(default=AUDIENCE, min_length=1)
    # A connection whose TLS handshake is not done this long after it opened is closed,
    # and so is one that has not sent a whole request's headers this long after its
    # handshake or its last answer (also the idle keep-alive timeout; workers' HTTP
    # client drops idle connections after 5 s).
    api_header_timeout_seconds: float = Field(default=15.0, gt=0)
    # Connections the worker API holds at once, from one client address and in all (at
    # most half the process' open-file limit); one more is closed as it is accepted
    # (docs/security.md#connection-bounds). A worker holds one or two.
    api_max_connections_per_client: int = Field(default=64, ge=1)
    api_max_connections: int = Field(default=4096, ge=1)
    # The kubelet's probes ask /healthz here, plain HTTP, never subject to the workers'
    # caps; 0: on the API's port only (local development).
    probe_port: int = Field(default=8081, ge=0, le=65535)
    # A request whose body takes longer is answered 408 and its connection closed.
    api_body_timeout_seconds: float = Field(default=10.0, gt=0)
    # New tokens (each a TokenReview) one source address may present: a burst, then a rate.
    token_reviews_per_second: float = Field(default=5.0, gt=0)
    token_review_burst: int = Field(default=20, ge=1)
    # Which streams and endpoints each namespace's StreamConsumers may have the operator
    # call AWS for, as JSON ({"default": {...}, "namespaces": {"team-a": {...}}}).
    aws_access: AccessPolicy = Field(default_factory=AccessPolicy)
    # Namespaces whose StreamConsumers may ask for `spec.pod.unrestricted` worker pods
    # (hostPath, root, ...), as a JSON list: an admin's choice, never a tenant's.
    unrestricted_pod_namespaces: frozenset[str] = frozenset()
    shard_sync_seconds: float = Field(default=10.0, gt=0)
    # Backlog probes (a GetShardIterator and a GetRecords each, for shards no worker
    # holds and for quiet ones the stuck-shard watchdog looks at) of all consumers
    # together: about 4 ms of CPU each (docs/sizing.md#many-consumers-on-one-operator).
    backlog_probes_per_second: float = Field(default=20.0, gt=0)
    # A listing that takes longer is abandoned (the loop keeps the last one meanwhile).
    shard_sync_timeout_seconds: float = Field(default=30.0, gt=0)
    status_interval_seconds: float = Field(default=1.0, gt=0)
    status_write_timeout_seconds: float = Field(default=10.0, gt=0)
    # Past this many leases and finished shards a consumer's table is kept in this many
    # ConfigMaps, the status referencing them (docs/design.md#lease-groups).
    lease_groups_after: int = Field(default=INLINE_MAX_SHARDS, ge=0)
    lease_groups: int = Field(default=GROUP_COUNT, ge=1, le=MAX_GROUPS)
    # Such a table as a lease log (docs/design.md#the-lease-log); false: every write
    # rewrites the groups that changed, as before the log (to roll back past it).
    lease_log: bool = True
    lease_log_group_shards: int = Field(default=SHARDS_PER_LOG_GROUP, ge=1)
    # Right after a start, heartbeats for consumers not loaded yet get 503, not 404.
    startup_grace_seconds: float = Field(default=30.0, ge=0)

    # One active replica among several, elected with a coordination.k8s.io/v1 Lease.
    leader_election: bool = True
    leader_lease_name: str = "streamconsumer-operator"
    leader_lease_seconds: float = Field(default=15.0, gt=0)
    leader_renew_deadline_seconds: float = Field(default=10.0, gt=0)
    leader_retry_seconds: float = Field(default=2.0, gt=0)
    # This replica's pod (downward API); the leader labels it for the worker API Service.
    pod_name: str | None = None

    @model_validator(mode="after")
    def _timing_is_consistent(self) -> OperatorConfig:
        self.election_timing()  # raises with the reason
        return self

    def election_timing(self) -> ElectionTiming:
        return ElectionTiming(
            lease_seconds=self.leader_lease_seconds,
            renew_deadline_seconds=self.leader_renew_deadline_seconds,
            retry_seconds=self.leader_retry_seconds,
        )

    def lease_layout(self) -> Layout:
        return Layout(
            self.lease_groups_after,
            self.lease_groups,
            log=self.lease_log,
            log_group_shards=self.lease_log_group_shards,
        )

    def identity(self) -> str:
        """Who holds the Lease: the pod, or this process outside a cluster."""
        return self.pod_name or f"{socket.gethostname()}-{os.getpid()}"
