"""The operator's side of the worker protocol in the worker's own process, without HTTP
or Kubernetes: for tests and benchmarks of the threaded worker runtime."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.core.leases import CheckpointRefused
from streamconsumer.core.lineage import Shard
from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    StartPosition,
)
from streamconsumer.processor import ProcessorFactory
from streamconsumer.sources.base import ReadResult, ShardReader, StreamSource
from streamconsumer.worker.client import OperatorRefused
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.runtime import Worker
from streamconsumer.worker.source import worker_source
from testbed.kinesis import REGION, KinesisEmulator
from testbed.specs import consumer_spec, worker_config

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


class Read(NamedTuple):
    started: float  # perf_counter
    seconds: float
    records: int


class TimedReads:
    """A stream source whose reads are noted per shard: when each began, how long it
    took and how many records it brought (benchmarks of the worker's pacing)."""

    def __init__(self, source: StreamSource) -> None:
        self.source = source
        self.reads: dict[str, list[Read]] = defaultdict(list)

    def __getattr__(self, name: str) -> object:
        return getattr(self.source, name)

    def list_shards(self) -> list[Shard]:
        return self.source.list_shards()

    def open_reader(self, shard_id: str, start: StartPosition) -> ShardReader:
        reader = self.source.open_reader(shard_id, start)
        reads = self.reads[shard_id]

        class Timed:
            def read(self) -> ReadResult:
                started = time.perf_counter()
                result = reader.read()
                reads.append(Read(started, time.perf_counter() - started, len(result.records)))
                return result

        return Timed()  # type: ignore[return-value]


# A worker that reads again and retries a failed call soon: tests that wait for a drain.
BRISK: dict[str, Any] = {"idle_between_reads_ms": 50, "on_failure": {"initialBackoffSeconds": 0.1}}


def emulator_worker(emulator: KinesisEmulator, stream: str, **fields: Any) -> WorkerConfig:
    """A worker's settings for `stream` on the emulator; `fields` as `worker_config`'s."""
    return worker_config(
        stream_name=stream,
        endpoint_url=emulator.endpoint_url,
        region=REGION,
        **{"drain_seconds": 10, **fields},
    )


def run_worker(
    config: WorkerConfig,
    source: StreamSource | TimedReads,
    processor: ProcessorFactory,
    done: Callable[[], bool],
    timeout: float,
    operator: InProcessOperator | None = None,
) -> bool:
    """The threaded worker runtime on `source`, leased by `operator` (a new
    InProcessOperator), until `done()` or `timeout` seconds; then drained. Whether it
    stopped once drained."""
    operator = operator or InProcessOperator(source.list_shards())
    worker = Worker(config, operator, source, processor)  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.drain()
    runner.join(30)
    return not runner.is_alive()


def drain_stream(
    config: WorkerConfig, processor: ProcessorFactory, done: Callable[[], bool]
) -> InProcessOperator:
    """`run_worker` on the stream `config` names, within a minute: the operator that
    leased it (its leases released, with their positions)."""
    source = worker_source(config)
    operator = InProcessOperator(source.list_shards())
    assert run_worker(config, source, processor, done, 60, operator), "the worker did not drain"
    return operator
