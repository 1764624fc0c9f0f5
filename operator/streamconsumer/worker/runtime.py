"""The worker process: a heartbeat loop that joins, renews and leaves, and one
ShardConsumer per held shard. SIGTERM drains: the operator revokes every shard by
hand-off, each finishes its batch, checkpoints and releases, then the process exits."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

from streamconsumer.models import HeartbeatRequest, HeartbeatResponse, RevocationReason
from streamconsumer.processor import ProcessorFactory
from streamconsumer.sources.base import StreamSource
from streamconsumer.worker.client import OperatorClient, OperatorUnavailable
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.fence import Fence
from streamconsumer.worker.shard import ShardConsumer, Stop

log = logging.getLogger(__name__)
INITIAL_HEARTBEAT_SECONDS = 1.0


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        operator: OperatorClient,
        source: StreamSource,
        processor_factory: ProcessorFactory,
        drain_timeout: float = 25.0,
    ) -> None:
        self.config = config
        self.name = config.worker_name
        self._operator = operator
        self._source = source
        self._factory = processor_factory
        self._drain_timeout = drain_timeout
        self._fence = Fence()
        self._shards: dict[str, ShardConsumer] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        self._wake = threading.Event()
        self._interval = INITIAL_HEARTBEAT_SECONDS

    def drain(self, *_: object) -> None:
        """Begin a graceful shutdown (SIGTERM)."""
        self._draining.set()
        self._wake.set()

    def _done(self, shard_id: str) -> None:
        with self._lock:
            self._shards.pop(shard_id, None)
        self._wake.set()  # tell the operator soon (finished or released)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        drain_deadline: float | None = None
        while True:
            if self._draining.is_set() and drain_deadline is None:
                drain_deadline = time.monotonic() + self._drain_timeout
            self._heartbeat()
            with self._lock:
                idle = not self._shards
            if drain_deadline is not None and (idle or time.monotonic() > drain_deadline):
                break
            self._wake.wait(self._interval)
            self._wake.clear()
        self._shutdown()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.drain()

    def _heartbeat(self) -> None:
        with self._lock:
            held = [shard.held() for shard in self._shards.values()]
        request = HeartbeatRequest(worker=self.name, held=held, draining=self._draining.is_set())
        sent_at = time.monotonic()
        try:
            response = self._operator.heartbeat(request)
        except OperatorUnavailable as error:
            log.warning(
                "heartbeat failed (fence closes in %.1fs): %s", self._fence.remaining(), error
            )
            self._interval = min(self._interval, 1.0)
            return
        self._fence.renew(sent_at, response.lease_duration_ms / 1000)
        self._interval = max(0.1, response.lease_duration_ms / 1000 / 3)
        self._apply(response)

    def _apply(self, response: HeartbeatResponse) -> None:
        for revocation in response.revocations:
            with self._lock:
                shard = self._shards.get(revocation.shard_id)
            if shard is not None:
                lost = revocation.reason is RevocationReason.LOST
                shard.request_stop(Stop.LOST if lost else Stop.HANDOFF)
        if self._draining.is_set():
            return
        for assignment in response.assignments:
            with self._lock:
                current = self._shards.get(assignment.shard_id)
                if current is not None:
                    if current.epoch == assignment.epoch:
                        continue
                    current.request_stop(Stop.LOST)  # an older grant of ours: fenced out
                    continue
                shard = ShardConsumer(
                    self.name,
                    assignment,
                    self._source,
                    self._operator,
                    self._factory,
                    self._fence,
                    prefetch=self.config.prefetch,
                    idle_seconds=self.config.idle_between_reads_ms / 1000,
                    on_done=self._done,
                )
                self._shards[assignment.shard_id] = shard
            shard.start()

    def _shutdown(self) -> None:
        with self._lock:
            remaining = list(self._shards.values())
        for shard in remaining:
            shard.request_stop(Stop.HANDOFF)
        for shard in remaining:
            shard.join(timeout=5.0)
        self._operator.close()
