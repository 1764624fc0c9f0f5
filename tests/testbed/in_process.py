"""The operator's side of the worker protocol in the worker's own process, without HTTP
or Kubernetes: for tests and benchmarks of the threaded worker runtime."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from streamconsumer.controller.lease_coordinator import DurableState, LeaseCoordinator
from streamconsumer.core.leases import CheckpointRefused
from streamconsumer.core.lineage import Shard
from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from streamconsumer.worker.client import OperatorRefused
from testbed.specs import consumer_spec

SPEC = consumer_spec(lease_seconds=3)
CREATED = datetime(2026, 1, 1, tzinfo=UTC)  # the consumer's creation (LATEST starts there)


class InProcessOperator:
    """The operator's protocol without HTTP: a real LeaseCoordinator, its engine stepped and its
    table 'saved' on every call."""

    def __init__(self, shards: list[Shard]) -> None:
        self.coordinator = LeaseCoordinator(
            SPEC, DurableState(), now=time.monotonic(), created=CREATED
        )
        self.coordinator.set_shards(shards)
        self.lock = threading.Lock()

    def _settle(self) -> None:
        now = time.monotonic()
        self.coordinator.step(now)
        self.coordinator.persisted(self.coordinator.snapshot(now), self.coordinator.version)

    def heartbeat(
        self, request: HeartbeatRequest, timeout: float | None = None
    ) -> HeartbeatResponse:
        with self.lock:
            self._settle()
            response = self.coordinator.heartbeat(request, time.monotonic())
            self._settle()
            return response

    def checkpoint(
        self, request: CheckpointRequest, timeout: float | None = None
    ) -> CheckpointResponse:
        with self.lock:
            try:
                lease = self.coordinator.checkpoint(request)
            except CheckpointRefused as refused:
                raise OperatorRefused(str(refused), lease_lost=refused.lease_lost) from None
            self._settle()
            return CheckpointResponse(
                shard_id=request.shard_id,
                epoch=lease.epoch,
                checkpoint=lease.checkpoint,
                persisted=True,
            )

    def close(self) -> None:
        pass
