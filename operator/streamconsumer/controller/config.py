"""The operator's own settings, from STREAMCONSUMER_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STREAMCONSUMER_", frozen=True)

    api_host: str = "0.0.0.0"
    api_port: int = Field(default=8080, ge=1, le=65535)
    # How workers reach the API (the operator's Service in a cluster). https:// serves
    # TLS (the chart's default); http:// is for local development and tests only.
    api_url: str = Field(
        default="https://streamconsumer-operator.streamconsumer-system.svc:8080",
        pattern=r"^https?://",
    )
    # Where the operator runs (the CA Secret lives here) and its Service, whose DNS names
    # the serving certificate covers.
    namespace: str = "streamconsumer-system"
    service_name: str = "streamconsumer-operator"
    # The operator's own CA (created if absent); its key never leaves this namespace.
    tls_ca_secret: str = "streamconsumer-operator-ca"
    # More names for the serving certificate (the chart adds the Service's cluster IP).
    tls_sans: list[str] = Field(default_factory=list)
    # cert-manager's Secret mounted here (tls.crt, tls.key, ca.crt): no CA of our own.
    tls_cert_dir: str | None = None
    shard_sync_seconds: float = Field(default=10.0, gt=0)
    # A listing that takes longer is abandoned (the loop keeps the last one meanwhile).
    shard_sync_timeout_seconds: float = Field(default=30.0, gt=0)
    status_interval_seconds: float = Field(default=1.0, gt=0)
    status_write_timeout_seconds: float = Field(default=10.0, gt=0)
    # Right after a start, heartbeats for consumers not loaded yet get 503, not 404.
    startup_grace_seconds: float = Field(default=30.0, ge=0)
