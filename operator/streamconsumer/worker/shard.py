"""One held shard: a reader thread that reads ahead (bounded), and a processing thread
that calls the user's processor in KCL order, retries it on failure, checkpoints through
the operator, and stops by hand-off, loss, shard end or shutdown."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import Protocol

from streamconsumer.core.backoff import Backoff
from streamconsumer.models import Assignment, CheckpointRequest, CheckpointResponse, HeldShard
from streamconsumer.processor import (
    SHARD_END,
    Checkpointer,
    LeaseLostError,
    ProcessorFactory,
    RecordProcessor,
    ShardInfo,
)
from streamconsumer.sources.base import ReadResult, StreamSource
from streamconsumer.worker import metrics
from streamconsumer.worker.client import OperatorUnavailable
from streamconsumer.worker.fence import Fence

log = logging.getLogger(__name__)


class CheckpointSink(Protocol):
    """Where checkpoints go: the operator's API (OperatorClient) in a real worker."""

    def checkpoint(self, request: CheckpointRequest) -> CheckpointResponse: ...


class Stop(Enum):
    HANDOFF = "handoff"  # planned: finish the batch, checkpoint, release
    LOST = "lost"  # fenced out: stop at once, no checkpoint


class ShardConsumer:
    def __init__(
        self,
        worker: str,
        assignment: Assignment,
        source: StreamSource,
        operator: CheckpointSink,
        processor_factory: ProcessorFactory,
        fence: Fence,
        prefetch: int,
        idle_seconds: float,
        on_done: Callable[[str], None],
    ) -> None:
        self.worker = worker
        self.shard_id = assignment.shard_id
        self.epoch = assignment.epoch
        self._assignment = assignment
        self._source = source
        self._operator = operator
        self._factory = processor_factory
        self._fence = fence
        self._idle = idle_seconds
        self._on_done = on_done
        self._batches: queue.Queue[ReadResult | BaseException] = queue.Queue(maxsize=prefetch)
        self._stop: Stop | None = None
        self._stop_lock = threading.Lock()
        self._halt = threading.Event()  # ends the reader
        self.last_processed: str | None = assignment.start.sequence_number
        self.millis_behind: int | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"shard-{self.shard_id}", daemon=True
        )
        self._reader = threading.Thread(
            target=self._read, name=f"read-{self.shard_id}", daemon=True
        )

    def start(self) -> None:
        self._reader.start()
        self._thread.start()

    def request_stop(self, reason: Stop) -> None:
        with self._stop_lock:
            if self._stop is not Stop.LOST:  # loss overrides a pending hand-off
                self._stop = reason

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def held(self) -> HeldShard:
        return HeldShard(
            shard_id=self.shard_id,
            epoch=self.epoch,
            sequence_number=self.last_processed,
            millis_behind_latest=self.millis_behind,
        )

    # --- reading ahead --------------------------------------------------------------

    def _read(self) -> None:
        try:
            reader = self._source.open_reader(self.shard_id, self._assignment.start)
            while not self._halt.is_set():
                result = reader.read()
                while not self._halt.is_set():
                    try:
                        self._batches.put(result, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if result.shard_end:
                    return
                if not result.records:
                    self._halt.wait(self._idle)
        except BaseException as error:  # surfaced to the processing thread
            self._batches.put(error)

    # --- processing -----------------------------------------------------------------

    def _commit(self, sequence: str) -> None:
        self._call_operator(
            CheckpointRequest(
                worker=self.worker,
                shard_id=self.shard_id,
                epoch=self.epoch,
                sequence_number=sequence,
            )
        )

    def _call_operator(self, request: CheckpointRequest) -> None:
        """Checkpoints, retrying while the operator is unreachable. Meanwhile this shard
        delivers nothing more, and once the lease runs out the whole worker is fenced; an
        outage costs a pause: when the operator is back the checkpoint lands if the lease
        is still ours (same epoch), or is refused as lost (DESIGN §3.8)."""
        backoff = Backoff(base=0.05, cap=1.0)
        attempt = 0
        while True:
            try:
                self._operator.checkpoint(request)
                return
            except OperatorUnavailable as error:
                if self._stop is Stop.LOST:
                    raise LeaseLostError("revoked while the operator was unreachable") from error
                if attempt == 0:
                    log.warning("%s: checkpoint waits for the operator: %s", self.shard_id, error)
                time.sleep(backoff.delay(attempt))
                attempt += 1

    def _run(self) -> None:
        processor = self._factory()
        checkpointer = Checkpointer(
            self.shard_id, self._commit, self._assignment.start.sequence_number
        )
        ended = False
        pending: ReadResult | None = None  # kept until processed: a batch is never dropped
        # Processors that flush on time (KCL's callProcessRecordsEvenForEmptyRecordList).
        wants_empty = bool(getattr(processor, "wants_empty_batches", False))
        try:
            processor.initialize(
                ShardInfo(
                    self.shard_id, checkpointer.last_checkpoint, tuple(self._assignment.parents)
                )
            )
            while True:
                if self._stop is Stop.LOST:
                    processor.lease_lost()
                    return
                if self._stop is Stop.HANDOFF:
                    processor.shutdown_requested(checkpointer)
                    self._release()
                    return
                if not self._fence.open():
                    time.sleep(0.05)  # self-fenced: deliver nothing until renewed
                    continue
                if pending is None:
                    try:
                        item = self._batches.get(timeout=0.1)
                    except queue.Empty:
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    pending = item
                batch = pending
                if batch.records or wants_empty:
                    checkpointer._delivering(batch.records)
                    if not self._process(processor, batch, checkpointer):
                        continue
                if batch.records:
                    self.last_processed = batch.records[-1].sequence_number
                if batch.millis_behind_latest is not None:
                    self.millis_behind = batch.millis_behind_latest
                    metrics.MILLIS_BEHIND.labels(self.shard_id).set(batch.millis_behind_latest)
                if batch.shard_end:
                    checkpointer._shard_ended()
                    processor.shard_ended(checkpointer)
                    if checkpointer.last_checkpoint != SHARD_END:
                        log.warning("%s: shard_ended did not checkpoint; doing it", self.shard_id)
                        checkpointer.checkpoint()
                    ended = True
                    return
                pending = None
        except LeaseLostError as lost:
            log.warning("%s: lease lost: %s", self.shard_id, lost)
            processor.lease_lost()
        except Exception:
            log.exception("%s: stopped on an unexpected error", self.shard_id)
        finally:
            self._halt.set()
            self._on_done(self.shard_id)
            if ended:
                log.info("%s: finished (SHARD_END)", self.shard_id)

    def _process(
        self, processor: RecordProcessor, batch: ReadResult, checkpointer: Checkpointer
    ) -> bool:
        """Calls process_records until it returns; retries with back-off, never skips.
        Returns False if the shard must stop before the batch was processed."""
        backoff = Backoff(base=0.1, cap=30.0)
        attempt = 0
        while True:
            if self._stop is Stop.LOST or not self._fence.open():
                return False
            started = time.perf_counter()
            try:
                processor.process_records(list(batch.records), checkpointer)
                metrics.PROCESS_SECONDS.observe(time.perf_counter() - started)
                metrics.RECORDS.labels(self.shard_id).inc(len(batch.records))
                metrics.BYTES.labels(self.shard_id).inc(sum(len(r.data) for r in batch.records))
                return True
            except LeaseLostError:
                raise
            except Exception:
                metrics.PROCESS_SECONDS.observe(time.perf_counter() - started)
                metrics.PROCESS_FAILURES.labels(self.shard_id).inc()
                log.exception("%s: processor failed; retrying the same batch", self.shard_id)
                time.sleep(backoff.delay(attempt))
                attempt += 1

    def _release(self) -> None:
        release = CheckpointRequest(
            worker=self.worker, shard_id=self.shard_id, epoch=self.epoch, release=True
        )
        with contextlib.suppress(LeaseLostError):  # already gone: nothing to release
            self._call_operator(release)
