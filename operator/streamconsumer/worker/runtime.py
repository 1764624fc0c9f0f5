"""The worker process: threads that drive the sans-I/O cores. The main thread heartbeats
(WorkerCore); each held shard has a reader thread (GetRecords, read ahead up to
`prefetch`) and a processing thread that runs the steps its ShardMachine asks for —
processor calls and checkpoints. A watchdog thread watches the processor calls in flight
(`WorkerCore.watch`): a thread cannot be interrupted, so a call that outlives its shard's
fence ends the process at once. Every call into a core holds one lock; processor calls
and HTTP happen outside it. SIGTERM drains: every shard is handed off, then we exit."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from streamconsumer.core.backoff import Backoff
from streamconsumer.deadletter import DeadLetterWriter, FailedBatch, LetterTooLarge
from streamconsumer.models import CheckpointRequest
from streamconsumer.processor import ProcessorFactory, Record, RecordProcessor
from streamconsumer.sources.base import ShardReader, StreamSource, SubscribedReader
from streamconsumer.worker import metrics
from streamconsumer.worker.calls import (
    Fanout,
    Interrupted,
    MachineParts,
    PartlyFailed,
    call_processor,
    in_turn,
    threaded,
)
from streamconsumer.worker.client import (
    OperatorClient,
    OperatorRefused,
    OperatorUnavailable,
    OperatorUntrusted,
    checkpoint_outcome,
)
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.filtering import keeper
from streamconsumer.worker.shard import (
    CALL_NAMES,
    Answer,
    DeadLetter,
    Deliver,
    Finished,
    SendCheckpoint,
    ShardMachine,
    Skip,
    Wait,
)

log = logging.getLogger(__name__)
MAX_WAIT_SECONDS = 1.0  # wake up at least this often (a fence may have closed)
EXIT_REFUSED = 2  # the operator refused this worker for too long
EXIT_CALL_STUCK = 3  # a processor call outlived its shard's fence, or hung past the timeout


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        operator: OperatorClient,
        source: StreamSource,
        processor_factory: ProcessorFactory,
        dead_letters: DeadLetterWriter | None = None,
    ) -> None:
        self.config = config
        self._dead_letters = dead_letters
        self._operator = operator
        self._source = source
        self._factory = processor_factory
        # A class factory carries the flag; a plain function's processor never wants empties.
        wants_empty = bool(getattr(processor_factory, "wants_empty_batches", False))
        self.core = WorkerCore(
            config.worker_name,
            config.prefetch,
            wants_empty,
            config.give_up_seconds,
            policy=config.on_failure,
            drain_seconds=config.drain_seconds,
            max_reads_per_second=config.max_reads_per_second,
            keep=keeper(config.filter),
            parallelism=config.parallelism,
            batch_size=config.batch_size,
        )
        if self.core.parallelism < config.parallelism or self.core.batch_size != config.batch_size:
            log.warning(
                "worker: processor.parallelism and batchSize ignored: a batching processor "
                "takes whole reads, one call at a time"
            )
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._calls_changed = threading.Event()  # wakes the watchdog: a call began
        self._threads: list[threading.Thread] = []
        self._drain_asked_at: float | None = None  # SIGTERM's moment, until run() drains
        # The handler touches no lock (an Event holds one, which the main thread may hold
        # when the handler runs on it): it writes a byte here, and a thread wakes run().
        self._signalled_r, self._signalled_w = os.pipe()
        os.set_blocking(self._signalled_w, False)
        threading.Thread(target=self._relay_signals, name="signals", daemon=True).start()

    # --- lifecycle ---------------------------------------------------------------------

    def run(self) -> int:
        """Heartbeats until done (drained, or giving up); returns the exit status. After
        EXIT_CALL_STUCK a processor call is still running: end with `os._exit`, since an
        interpreter's exit may wait for threads (atexit hooks) that wait for that call."""
        watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        watchdog.start()
        while True:
            self._drain_if_asked()
            self._heartbeat()
            self._drain_if_asked()
            with self._lock:
                done, interval = self.core.done(time.monotonic()), self.core.interval
                if self.core.draining and self.core.machines:
                    interval = min(interval, 0.25)  # hand-offs come with the next answers
            if done:
                break
            self._wake.wait(interval)
            self._wake.clear()
        with self._lock:
            stuck = self.core.overran or self.core.hung
        if stuck:
            log.error("worker: %s", stuck)
            return EXIT_CALL_STUCK
        for thread in self._threads:
            thread.join(timeout=1.0)
        self._operator.close()
        if self.core.exit_reason:
            log.error("worker: %s", self.core.exit_reason)
            return EXIT_REFUSED
        return 0

    def _watch(self) -> None:
        """The watchdog: looks at the calls in flight when the core says, or when a call
        begins. A call past its fence ends the process here and now: the operator may grant
        the shard to another worker soon after, and only the process's end stops the call."""
        while True:
            with self._lock:
                now = time.monotonic()
                hung_before = self.core.hung
                check_at = self.core.watch(now)
                overran, hung = self.core.overran, self.core.hung
            if overran is not None:
                log.critical("worker: %s", overran)
                logging.shutdown()
                os._exit(EXIT_CALL_STUCK)
            if hung is not None and hung_before is None:
                log.error("worker: %s", hung)
                self._wake.set()  # the next heartbeat says draining
            wait = MAX_WAIT_SECONDS if check_at is None else check_at - now
            self._calls_changed.wait(max(0.0, min(wait, MAX_WAIT_SECONDS)))
            self._calls_changed.clear()

    def drain(self, *_: object) -> None:
        """Begin a graceful shutdown (the SIGTERM handler). A handler runs between two
        bytecodes of the main thread, which may hold `_lock` right then (run() and the
        heartbeat take it): it only notes the moment, and run() drains from it."""
        if self._drain_asked_at is None:
            self._drain_asked_at = time.monotonic()
        with contextlib.suppress(BlockingIOError):  # (a wake is pending already)
            os.write(self._signalled_w, b"\0")

    def _relay_signals(self) -> None:
        while os.read(self._signalled_r, 512):
            self._wake.set()

    def _drain_if_asked(self) -> None:
        asked = self._drain_asked_at
        if asked is not None:
            with self._lock:
                self.core.drain(asked)  # (a no-op once draining)

    # --- heartbeats --------------------------------------------------------------------

    def _heartbeat(self) -> None:
        with self._lock:
            request = self.core.heartbeat(time.monotonic())
            timeout = self.core.request_timeout
        sent_at = time.monotonic()
        try:
            response = self._operator.heartbeat(request, timeout)
        except (OperatorUnavailable, OperatorRefused) as error:
            refused = str(error) if isinstance(error, OperatorRefused) else None
            with self._lock:
                self.core.failed(refused, time.monotonic())
                # Untrusted is a configuration error, not an outage: say it loudly.
                report = log.error if isinstance(error, OperatorUntrusted) else log.warning
                report("heartbeat failed: %s", error)
            return
        self._drain_if_asked()  # a SIGTERM while it was out: its grants are not started
        with self._lock:
            started, resend = self.core.answered(response, sent_at, time.monotonic())
        for machine in started:
            self._start(machine)
        for release in resend:
            self._send_quietly(release)

    def _send_quietly(self, request: CheckpointRequest) -> None:
        """A release or last word for a shard we do not run: best effort (the operator
        asks again if it did not get it)."""
        try:
            self._operator.checkpoint(request)
        except Exception as error:  # any failure: it will be asked again
            log.info("%s: release not delivered: %s", request.shard_id, error)

    # --- shards --------------------------------------------------------------------------

    def _start(self, machine: ShardMachine) -> None:
        metrics.shard_started(machine.shard_id)
        changed = threading.Condition(self._lock)
        for target, name in ((self._process, "shard"), (self._read, "read")):
            thread = threading.Thread(
                target=target, args=(machine, changed), name=f"{name}-{machine.shard_id}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def _read(self, machine: ShardMachine, changed: threading.Condition) -> None:
        reader = self._source.open_reader(machine.shard_id, machine.assignment.start)
        try:
            self._read_until_done(machine, changed, reader)
        finally:
            if isinstance(reader, SubscribedReader):
                reader.close()

    def _read_until_done(
        self, machine: ShardMachine, changed: threading.Condition, reader: ShardReader
    ) -> None:
        # A subscription waits for its events in read(): no pause between reads.
        idle_seconds = (
            0.0
            if isinstance(reader, SubscribedReader)
            else self.config.idle_between_reads_ms / 1000
        )
        backoff = Backoff(base=0.2, cap=10.0)
        failures = 0
        while True:
            with changed:
                # Woken (notify) as soon as the processor makes room: it never waits on a
                # reader that sleeps while records are readable.
                while machine.outcome is None and not machine.wants_read():
                    changed.wait(MAX_WAIT_SECONDS)
                _sleep_until(machine, changed, machine.read_allowed_at())
                if machine.outcome is not None:
                    return
                machine.reading(time.monotonic())
            try:
                result = reader.read()
            except Exception as error:  # the shard pauses and reads again
                throttled = metrics.read_failed(machine.shard_id, error)
                log.log(
                    logging.DEBUG if throttled else logging.WARNING,
                    "%s: read failed: %s",
                    machine.shard_id,
                    error,
                )
                with changed:
                    _sleep_until(machine, changed, time.monotonic() + backoff.delay(failures))
                failures += 1
                continue
            failures = 0
            sifted = machine.sift(result)  # outside the lock: it may parse every record
            metrics.filtered(machine.shard_id, sifted.dropped)
            with changed:
                machine.read(result, sifted)
                changed.notify_all()
                if not result.records and not result.shard_end and idle_seconds:
                    _sleep_until(machine, changed, time.monotonic() + idle_seconds)

    def _process(self, machine: ShardMachine, changed: threading.Condition) -> None:
        if machine.parallelism <= 1:
            self._process_with(machine, changed, in_turn)
            return
        # This thread runs one group of each call itself: the pool has one fewer.
        with ThreadPoolExecutor(
            machine.parallelism - 1, thread_name_prefix=f"calls-{machine.shard_id}"
        ) as pool:
            self._process_with(machine, changed, threaded(pool))

    def _process_with(
        self, machine: ShardMachine, changed: threading.Condition, fanout: Fanout
    ) -> None:
        processor: RecordProcessor | None = None
        shard = machine.shard_id
        parts = MachineParts(machine, time.monotonic, changed)
        while True:
            with changed:
                # Whatever the last step changed (a batch done, taken, or retried) may
                # have made room to read into: the reader looks again now, not in a second.
                changed.notify_all()
                now = time.monotonic()
                step = machine.next(now)
                if isinstance(step, Wait):
                    timeout = MAX_WAIT_SECONDS if step.until is None else step.until - now
                    changed.wait(max(0.0, min(timeout, MAX_WAIT_SECONDS)))
                    continue
                if isinstance(step, Finished):
                    self.core.finished(machine)
                    metrics.shard_left(shard)
                    changed.notify_all()  # the reader ends too
                    log.info("%s: %s", shard, step.outcome.value)
                    break
                if machine.call is not None:
                    self._calls_changed.set()  # the watchdog times it
            if isinstance(step, SendCheckpoint):
                answer = self._checkpoint(step.request)
                with changed:
                    machine.answered(answer, time.monotonic())
                continue
            if isinstance(step, DeadLetter):
                self._dead_letter(machine, step, changed)
                continue
            if isinstance(step, Skip):
                metrics.SKIPPED.labels(shard).inc(len(step.batch.records))
                log.warning(
                    "%s: %d records skipped: %s", shard, len(step.batch.records), step.error
                )
                with changed:
                    machine.returned(time.monotonic())
                continue
            started = time.perf_counter()
            try:
                processor = call_processor(step, machine, processor, self._factory, fanout, parts)
                if isinstance(step, Deliver):
                    metrics.batch_processed(
                        shard, _newly_done(step, len(step.batch.records)), started
                    )
            except Interrupted as cut:
                assert isinstance(step, Deliver)
                done = _newly_done(step, cut.done, cut.ahead)
                metrics.batch_processed(shard, done, started)
                log.info("%s: %s", shard, cut)
                with changed:
                    machine.interrupted(cut.done, cut.ahead)
                continue
            except PartlyFailed as partly:
                assert isinstance(step, Deliver)
                done = _newly_done(step, partly.done, partly.ahead)
                metrics.batch_partly_failed(shard, done, started)
                log.warning("%s: %s; retried from there after a back-off", shard, partly)
                with changed:
                    machine.partly_failed(
                        time.monotonic(), partly.done, str(partly), time.time(), partly.ahead
                    )
                continue
            except Exception as error:
                metrics.batch_failed(shard, started)
                log.exception(
                    "%s: processor failed in %s; retried after a back-off, then the "
                    "failure policy decides (a hand-off interrupts the retries)",
                    shard,
                    CALL_NAMES[type(step)],
                )
                with changed:
                    error_text = f"{type(error).__name__}: {error}"
                    machine.raised(time.monotonic(), error_text, wall=time.time())
                continue
            with changed:
                machine.returned(time.monotonic())
                if machine.millis_behind is not None:
                    metrics.behind(shard, machine.millis_behind)
        self._wake.set()  # tell the operator soon (finished or released)

    def _dead_letter(
        self, machine: ShardMachine, step: DeadLetter, changed: threading.Condition
    ) -> None:
        records = list(step.batch.records)
        batch = FailedBatch(
            f"{self.config.namespace}/{self.config.consumer}",
            machine.shard_id,
            records,
            step.error,
            step.attempts,
        )
        try:
            if self._dead_letters is None:
                raise RuntimeError("no dead-letter target configured")
            self._dead_letters.write(batch)
        except LetterTooLarge as refused:
            log.error("%s: blocked: %s", machine.shard_id, refused)
            with changed:
                machine.cannot_dead_letter(time.monotonic(), str(refused))
            return
        except Exception as error:
            log.warning("%s: dead letters not written, retried: %s", machine.shard_id, error)
            with changed:
                machine.raised(time.monotonic(), f"{type(error).__name__}: {error}")
            return
        metrics.DEAD_LETTERED.labels(machine.shard_id).inc(len(records))
        log.warning("%s: %d records dead-lettered: %s", machine.shard_id, len(records), step.error)
        with changed:
            machine.returned(time.monotonic())

    def _checkpoint(self, request: CheckpointRequest) -> Answer:
        timeout = self.core.waiting_timeout if request.wait else self.core.request_timeout
        return checkpoint_outcome(
            request.shard_id, lambda: self._operator.checkpoint(request, timeout)
        )


def _newly_done(
    step: Deliver, done: int, ahead: frozenset[tuple[int, int]] = frozenset()
) -> list[Record]:
    """The records a Deliver's call did: its first `done` and those `ahead`, but none an
    earlier call did (`Deliver.done`), so none is counted twice."""
    return [
        record
        for i, record in enumerate(step.batch.records)
        if (i < done or record.position in ahead) and record.position not in step.done
    ]


def _sleep_until(machine: ShardMachine, changed: threading.Condition, moment: float) -> None:
    """Waits (holding `changed`'s lock between waits) until `moment`, or until the shard
    ends; wake-ups before then are not a reason to read early."""
    while machine.outcome is None and (left := moment - time.monotonic()) > 0:
        changed.wait(min(left, MAX_WAIT_SECONDS))
