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
from streamconsumer.processor import ProcessorFactory, Record
from streamconsumer.sources.base import ShardReader, StreamSource, SubscribedReader
from streamconsumer.worker import metrics
from streamconsumer.worker.calls import Fanout, Interrupted, PartlyFailed, in_turn, threaded
from streamconsumer.worker.client import (
    OperatorClient,
    OperatorRefused,
    OperatorUnavailable,
    OperatorUntrusted,
    checkpoint_outcome,
)
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.driver import Effects, ShardDriver
from streamconsumer.worker.filtering import keeper
from streamconsumer.worker.shard import (
    CALL_NAMES,
    Answer,
    Call,
    DeadLetter,
    Deliver,
    Outcome,
    ShardMachine,
    Skip,
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
            batching_window_seconds=config.max_batching_window_seconds,
            max_records=config.max_records,
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
                machine.reading(time.monotonic(), time.time())
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
                machine.read(result, sifted, time.monotonic())
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
        effects = ThreadEffects(self, machine, changed)
        consumer = f"{self.config.namespace}/{self.config.consumer}"
        ShardDriver(machine, effects, self._factory, consumer, fanout).drive()
        self._wake.set()  # tell the operator soon (finished or released)

    def call_began(self) -> None:
        """A processor call of a shard began: the watchdog times it."""
        self._calls_changed.set()

    def write_dead_letters(self, batch: FailedBatch) -> None:
        if self._dead_letters is None:
            raise RuntimeError("no dead-letter target configured")
        self._dead_letters.write(batch)

    def checkpoint(self, request: CheckpointRequest) -> Answer:
        timeout = self.core.waiting_timeout if request.wait else self.core.request_timeout
        return checkpoint_outcome(
            request.shard_id, lambda: self._operator.checkpoint(request, timeout)
        )


class ThreadEffects(Effects):
    """The runtime's side of one shard's driver: its processing thread, the shard's
    condition (the lock it shares with the reader), monotonic time, HTTP, the dead-letter
    target, metrics and logs."""

    passes = ()

    def __init__(self, worker: Worker, machine: ShardMachine, changed: threading.Condition):
        self.lock = changed
        self._changed = changed
        self._worker = worker
        self._machine = machine
        self._shard = machine.shard_id
        self._started = 0.0  # perf_counter at the call's start, for its duration metric

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def proceed(self) -> bool:
        # Whatever the last step changed (a batch done, taken, or retried) may have made
        # room to read into: the reader looks again now, not in a second.
        self._changed.notify_all()
        return True

    def wait(self, until: float | None) -> bool:
        timeout = MAX_WAIT_SECONDS if until is None else until - time.monotonic()
        self._changed.wait(max(0.0, min(timeout, MAX_WAIT_SECONDS)))
        return True

    def begin(self, step: Call) -> bool:
        self._worker.call_began()  # the watchdog times it
        self._started = time.perf_counter()
        return True

    def checkpoint(self, request: CheckpointRequest) -> Answer:
        return self._worker.checkpoint(request)

    def write(self, batch: FailedBatch) -> None:
        self._worker.write_dead_letters(batch)

    def finished(self, outcome: Outcome) -> None:
        self._worker.core.finished(self._machine)
        metrics.shard_left(self._shard)
        self._changed.notify_all()  # the reader ends too
        log.info("%s: %s", self._shard, outcome.value)

    def settled(self, step: Call, error: Exception | None) -> None:
        shard, started = self._shard, self._started
        if isinstance(step, Skip):
            count = len(step.batch.records)
            metrics.SKIPPED.labels(shard).inc(count)
            log.warning("%s: %d records skipped: %s", shard, count, step.error)
        elif isinstance(step, DeadLetter):
            _dead_lettered(shard, step, error)
        elif isinstance(error, Interrupted) and isinstance(step, Deliver):
            metrics.batch_processed(shard, _newly_done(step, error.done, error.ahead), started)
            log.info("%s: %s", shard, error)
        elif isinstance(error, PartlyFailed) and isinstance(step, Deliver):
            done = _newly_done(step, error.done, error.ahead)
            metrics.batch_partly_failed(shard, done, started)
            log.warning("%s: %s; retried from there after a back-off", shard, error)
        elif error is not None:
            metrics.batch_failed(shard, started)
            log.error(
                "%s: processor failed in %s; retried after a back-off, then the failure "
                "policy decides (a hand-off interrupts the retries)",
                shard,
                CALL_NAMES[type(step)],
                exc_info=error,
            )
        elif isinstance(step, Deliver):
            metrics.batch_processed(shard, _newly_done(step, len(step.batch.records)), started)
        if (
            error is None
            and not isinstance(step, (Skip, DeadLetter))
            and self._machine.millis_behind is not None
        ):
            metrics.behind(shard, self._machine.millis_behind)


def _dead_lettered(shard: str, step: DeadLetter, error: Exception | None) -> None:
    count = len(step.batch.records)
    if isinstance(error, LetterTooLarge):
        log.error("%s: blocked: %s", shard, error)
    elif error is not None:
        log.warning("%s: dead letters not written, retried: %s", shard, error)
    else:
        metrics.DEAD_LETTERED.labels(shard).inc(count)
        log.warning("%s: %d records dead-lettered: %s", shard, count, step.error)


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
