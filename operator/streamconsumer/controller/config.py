"""The operator's own settings, from STREAMCONSUMER_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STREAMCONSUMER_", frozen=True)

    api_host: str = "0.0.0.0"
    api_port: int = Field(default=8080, ge=1, le=65535)
    # How workers reach the API (the operator's Service in a cluster).
    api_url: str = Field(
        default="http://streamconsumer-operator.streamconsumer-system.svc:8080",
        pattern=r"^https?://",
    )
    shard_sync_seconds: float = Field(default=10.0, gt=0)
    # A listing that takes longer is abandoned (the loop keeps the last one meanwhile).
    shard_sync_timeout_seconds: float = Field(default=30.0, gt=0)
    status_interval_seconds: float = Field(default=1.0, gt=0)
    status_write_timeout_seconds: float = Field(default=10.0, gt=0)
    # Right after a start, heartbeats for consumers not loaded yet get 503, not 404.
    startup_grace_seconds: float = Field(default=30.0, ge=0)
