"""The operator's own settings, from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    api_host: str = "0.0.0.0"
    api_port: int = 8080
    # How workers reach the API (the operator's Service in a cluster).
    api_url: str = "http://streamconsumer-operator.streamconsumer-system.svc:8080"
    shard_sync_seconds: float = 10.0
    status_interval_seconds: float = 1.0

    @classmethod
    def from_env(cls) -> OperatorConfig:
        env = os.environ
        return cls(
            api_host=env.get("STREAMCONSUMER_API_HOST", cls.api_host),
            api_port=int(env.get("STREAMCONSUMER_API_PORT", cls.api_port)),
            api_url=env.get("STREAMCONSUMER_API_URL", cls.api_url),
            shard_sync_seconds=float(
                env.get("STREAMCONSUMER_SHARD_SYNC_SECONDS", cls.shard_sync_seconds)
            ),
            status_interval_seconds=float(
                env.get("STREAMCONSUMER_STATUS_INTERVAL_SECONDS", cls.status_interval_seconds)
            ),
        )
