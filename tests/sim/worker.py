"""Simulated worker pods: the real WorkerCore and ShardMachines, driven by the worker's
own driver (`worker/driver.py`, as `worker/runtime.py` runs it), on a clock of their
own (an offset monotonic clock: no two processes agree on the time), over the
simulated network. A worker can be paused (its events wait), killed (they vanish) or
drained (SIGTERM). Its watchdog ends it (`crashed`) when a processor call outlives its
fence, or after a hung call's drain. Dead letters go through the real size check to a
queue with a size limit; a shard whose letter cannot fit must say so in every heartbeat
(blocked, naming the record)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from sim.ledger import Delivery, Ledger, Violation
from sim.operator import SimOperators
from sim.stream import ShardGone, SimReader, SimSource
from sim.world import Network, World, run_in_process, wall
from streamconsumer.awaiting import AsyncBaseRecordProcessor
from streamconsumer.controller.worker_api.answers import CHECKPOINT as CHECKPOINT_ROUTE
from streamconsumer.controller.worker_api.answers import HEARTBEAT as HEARTBEAT_ROUTE
from streamconsumer.deadletter import DeadLetters, FailedBatch, LetterTooLarge
from streamconsumer.deadletter.base import Letter
from streamconsumer.models import CheckpointRequest, CheckpointResponse, HeartbeatRequest
from streamconsumer.models.api import WIRE_VERSION, WIRE_VERSION_HEADER, worker_pod
from streamconsumer.models.base import WireModel
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.models.record_filter import RecordFilter
from streamconsumer.models.resource import Reading
from streamconsumer.processor import (
    BaseRecordProcessor,
    BatchResult,
    Checkpointer,
    ProcessResult,
    Record,
    RecordProcessor,
    ShardInfo,
)
from streamconsumer.sources.base import ReadResult
from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.worker.calls import GroupCall, Interrupted, PartlyFailed, Stopped
from streamconsumer.worker.client import (
    OperatorRefused,
    OperatorUnavailable,
    checkpoint_answer,
    checkpoint_outcome,
    heartbeat_answer,
    request_headers,
)
from streamconsumer.worker.core import WorkerCore
from streamconsumer.worker.driver import Effects, ShardDriver
from streamconsumer.worker.filtering import keeper
from streamconsumer.worker.shard import (
    Call,
    DeadLetter,
    Deliver,
    EndShard,
    Outcome,
    ShardMachine,
    Shutdown,
    Skip,
)

IDLE_READ = 0.5
DRAIN_SECONDS = 25.0  # a pod grace of 30 s, less the margin the operator keeps
SLOW_CALL_SECONDS = 30.0  # the longest a slow processor call takes
NEVER = 1e9  # a hung call's duration: it returns after every run has ended
QUEUE_LIMIT = 256 * 1024  # the dead-letter queue's MaximumMessageSize
HEARTBEAT, CHECKPOINT = HEARTBEAT_ROUTE.path, CHECKPOINT_ROUTE.path
# What a newer release may add to the wire: each side must take it and go on.
FROM_A_NEWER_WORKER = {"heldHints": {"prefetchDepth": 4}, "workerBuild": "next"}


@dataclass
class Trouble:
    """Processor faults in force, shared by every processor of a run."""

    world: World
    flaky_until: float = -1.0
    flaky_rate: float = 0.3
    # A shard's records after a sequence fail (the first of them is the poison)...
    poison: dict[str, int] = field(default_factory=dict)
    poison_until: float = -1.0  # ...until then
    sink_failing_until: float = -1.0
    sink_rate: float = 0.5
    slow_until: float = -1.0  # processor calls started before then take seconds, not ms
    hangs: int = 0  # the next n calls with records never return
    early_ends: int = 0  # the next n reads of an open shard say it ended (a buggy reader)

    def call_seconds(self, records: int) -> float:
        rng = self.world.rng
        if self.hangs and records:
            self.hangs -= 1
            return NEVER
        if self.world.now < self.slow_until:
            return rng.uniform(0.5, SLOW_CALL_SECONDS)
        return rng.uniform(0.001, 0.03) * (1 + records / 10)

    partial_until: float = -1.0  # failures before then are partial batch responses

    def batch_fails(self, shard_id: str, records: list[Record]) -> bool:
        return self.failed_from(shard_id, records) is not None

    def failed_from(self, shard_id: str, records: list[Record]) -> int | None:
        """The index of the batch's first failing record (the poison, or any under a
        flaky fault); None when the batch succeeds."""
        now = self.world.now
        after = self.poison.get(shard_id)
        if after is not None and now < self.poison_until:
            for index, record in enumerate(records):
                if int(record.sequence_number) > after:
                    return index
        if now < self.flaky_until and self.world.rng.random() < self.flaky_rate:
            # (drawn only when told: the other faults' examples keep their random draws)
            partly = records and self.reports_partly()
            return self.world.rng.randrange(len(records)) if partly else 0
        return None

    def reports_partly(self) -> bool:
        return self.world.now < self.partial_until

    def sink_fails(self) -> bool:
        return self.world.now < self.sink_failing_until and self.world.rng.random() < self.sink_rate


class Recorder(BaseRecordProcessor):
    """Marks records done when process_records returns; checkpoints every `every`
    batches (0: only when the shard ends or moves), sometimes at a record mid-batch."""

    def __init__(self, ledger: Ledger, trouble: Trouble, every: int) -> None:
        self.ledger = ledger
        self.trouble = trouble
        self.every = every
        self.batches = 0

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        failed = self.trouble.failed_from(self.shard.shard_id, records)
        if failed is not None and not (records and self.trouble.reports_partly()):
            raise RuntimeError("injected processor failure")
        if failed is not None and self.trouble.world.rng.random() < 0.1:
            return BatchResult(failed=["0"])  # does not fit: the whole batch failed
        done = records if failed is None else records[:failed]
        self.ledger.done(self.shard.shard_id, [int(r.sequence_number) for r in done])
        self.batches += 1
        if self.every and self.batches % self.every == 0 and done:
            middle = len(done) // 2 if self.batches % 3 == 0 else len(done) - 1
            checkpointer.checkpoint(done[middle])
        elif self.every and self.batches % self.every == 0 and failed is None:
            checkpointer.checkpoint()  # an empty batch
        if failed is None:
            return None
        # Partial batch responses, in each of their forms.
        rest = records[failed:]
        if self.batches % 2:
            return BatchResult(failed=[r.sequence_number for r in rest])
        return BatchResult(failed=[rest[0]])  # the first failed is enough


class AsyncRecorder(AsyncBaseRecordProcessor):
    """The Recorder written async: the worker's AwaitingProcessor calls it, each
    coroutine stepped to its end in its turn (`stepped`), so that the simulation runs
    the async path (its per-call checkpointer too) with no loop thread."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def initialize(self, shard: ShardInfo) -> None:
        await asyncio.sleep(0)
        self.recorder.initialize(shard)

    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult:
        await asyncio.sleep(0)
        return self.recorder.process_records(records, checkpointer)

    async def shard_ended(self, checkpointer: Checkpointer) -> None:
        await asyncio.sleep(0)
        self.recorder.shard_ended(checkpointer)

    async def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        await asyncio.sleep(0)
        self.recorder.shutdown_requested(checkpointer)


def stepped(awaitable: Awaitable[Any]) -> Any:
    """Runs a coroutine that awaits nothing but `asyncio.sleep(0)` to its end, now."""
    steps = awaitable.__await__()
    try:
        while True:
            if steps.send(None) is not None:
                raise RuntimeError("a simulated processor awaited a real future")
    except StopIteration as end:
        return end.value


class Sink(BatchingProcessor):
    """A Spark-like sink: batches of whole reads, commit (which may fail), checkpoint."""

    def __init__(self, ledger: Ledger, trouble: Trouble, clock: Callable[[], float]) -> None:
        super().__init__(stream="sim", max_records=12, max_wait=2.0, clock=clock)
        self.ledger = ledger
        self.trouble = trouble

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        if self.trouble.sink_fails():
            raise OSError("injected sink failure")
        self.ledger.done(batch.shard_id, [int(r.sequence_number) for r in records])


class SimQueue:
    """The dead-letter queue: refuses a letter over its limit, as SQS does, and fails
    with the sink (`sink_errors`)."""

    name = "SQS message"

    def __init__(self, fails: Callable[[], bool]) -> None:
        self.fails = fails

    def limit(self) -> int:
        return QUEUE_LIMIT

    def size(self, letter: Letter) -> int:
        return len(letter.body)

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        if any(self.size(letter) > QUEUE_LIMIT for letter in letters):
            raise ValueError(f"InvalidParameterValue: longer than {QUEUE_LIMIT} bytes")
        if self.fails():
            raise OSError("injected dead-letter target failure")


class Running(Effects):
    """One ShardMachine of a simulated worker, driven by the worker's own driver: this is
    its host. Calls take simulated time (`begin` schedules them), checkpoints cross the
    simulated network (`checkpoint` answers later); the ledger hears every outcome."""

    passes = (Violation,)  # the ledger's, raised inside a call: never a processor failure

    def __init__(self, worker: SimWorker, machine: ShardMachine, reader: SimReader) -> None:
        self.worker = worker
        self.machine = machine
        self.reader = reader
        self.delivery: Delivery | None = None
        self.stepping = False
        self.reading = False
        self.read_failures = 0
        self.unwritable: str | None = None  # the record whose dead letter the queue cannot hold
        self.driver = ShardDriver(
            machine, self, lambda: worker.make_processor(worker), "sim", worker.fanout
        )

    def now(self) -> float:
        return self.worker.clock()

    def wall(self) -> float:
        return self.worker.wall()

    def wait(self, until: float | None) -> bool:
        if until is not None:
            # A hair after `until`: the offset clock rounds, and must not stay short of it.
            delay = max(0.0, until - self.now()) + 1e-6
            self.worker.schedule(delay, lambda: self.worker.poke(self))
        return False

    def finished(self, outcome: Outcome) -> None:
        self.worker.finished(self)

    def begin(self, step: Call) -> bool:
        worker, machine = self.worker, self.machine
        records: list[Record] = list(step.batch.records) if isinstance(step, Deliver) else []
        if isinstance(step, (Deliver, EndShard, Shutdown)):
            self.delivery = worker.ledger.begin(
                worker.name, machine.shard_id, machine.epoch, (r.sequence_number for r in records)
            )
        worker.watch()
        assert worker.trouble is not None
        duration = worker.trouble.call_seconds(len(records))
        worker.schedule(duration, lambda: self.driver.perform(step))
        return False

    def checkpoint(self, request: CheckpointRequest) -> None:
        worker = self.worker
        timeout = worker.core.waiting_timeout if request.wait else worker.core.request_timeout
        worker.request(timeout, CHECKPOINT, request, self._checkpointed)

    def _checkpointed(self, reply: tuple[int, bytes] | None) -> None:
        def read() -> CheckpointResponse:
            if reply is None:
                raise OperatorUnavailable("no answer")
            return checkpoint_answer(*reply)

        self.driver.answered(checkpoint_outcome(self.machine.shard_id, read))
        self.worker.poke(self)

    def write(self, batch: FailedBatch) -> None:
        self.worker.dead_letters.write(batch)

    def settled(self, step: Call, error: Exception | None) -> None:
        """What the ledger counts of the outcome; then the next step and read."""
        ledger = self.worker.ledger
        if isinstance(step, (Skip, DeadLetter)):
            if error is None:
                sequences = [int(r.sequence_number) for r in step.batch.records]
                ledger.passed_over(self.machine.shard_id, sequences)
            elif isinstance(error, LetterTooLarge):
                # Not always the batch's first: records past maxRecordAgeSeconds are
                # dead-lettered together, without bisecting.
                self.unwritable = error.sequence_number
        elif isinstance(step, Deliver) and error is not None:
            self._counted(step, error)
        elif error is None:
            self.unwritable = None  # the processor returned: no longer held up
        if self.delivery is not None:
            ledger.end(self.delivery)
            self.delivery = None
        self.worker.poke(self)
        self.worker.read(self)

    def _counted(self, step: Deliver, error: Exception) -> None:
        """The ledger's count of a Deliver that did not return whole."""
        ledger, records = self.worker.ledger, step.batch.records
        if isinstance(error, (Interrupted, PartlyFailed)):
            # (The records an interrupted call left are not failed: no failure counted.)
            ledger.done_ahead.update(
                int(r.sequence_number) for r in records if r.position in error.ahead
            )
        if isinstance(error, PartlyFailed):
            failed = [r for r in records[error.done :] if r.position not in error.ahead]
            ledger.raised([int(r.sequence_number) for r in failed])
            if error.done:  # records done: past the dead letter, as the worker counts it
                self.unwritable = None
        elif not isinstance(error, Interrupted):  # (but for the records an earlier call did)
            ledger.raised([int(r.sequence_number) for r in records if r.position not in step.done])


@dataclass(eq=False)
class SimWorker:
    """One worker process: the production WorkerCore and ShardMachines, driven on the
    simulated clock, its requests crossing the simulated network as JSON."""

    world: World
    name: str
    network: Network
    operator: SimOperators
    source: SimSource
    ledger: Ledger
    make_processor: Callable[[SimWorker], RecordProcessor]
    wants_empty: InitVar[bool]
    on_exit: Callable[[SimWorker], None]
    policy: InitVar[FailurePolicy | None] = None
    record_filter: InitVar[RecordFilter | None] = None
    parallelism: InitVar[int] = 1
    batch_size: InitVar[int | None] = None
    reading: InitVar[Reading | None] = None

    def __post_init__(
        self,
        wants_empty: bool,
        policy: FailurePolicy | None,
        record_filter: RecordFilter | None,
        parallelism: int,
        batch_size: int | None,
        reading: Reading | None,
    ) -> None:
        world = self.world
        reading = reading or Reading()
        self.core = WorkerCore(
            self.name,
            prefetch=3,
            wants_empty_batches=wants_empty,
            rng=world.rng,
            policy=policy,
            drain_seconds=DRAIN_SECONDS,
            # No read budget: the examples were found with reads as fast as room allows, and
            # a budget only spreads the same events out (tests/unit/test_shard_machine.py).
            max_reads_per_second=1e9,
            keep=keeper(record_filter),
            parallelism=parallelism,
            batch_size=batch_size,
            batching_window_seconds=reading.max_batching_window_seconds,
            max_records=reading.max_records,
        )
        self.trouble: Trouble | None = None  # the dead-letter target fails with the sink
        self.dead_letters = DeadLetters(
            SimQueue(lambda: self.trouble is not None and self.trouble.sink_fails())
        )
        self.offset = world.rng.uniform(-1000.0, 1000.0)
        self.alive = True
        self.paused_until = -1.0
        self.running: dict[str, Running] = {}  # by shard
        self._beating = False
        self._plans = itertools.count(1)
        self._planned: int | None = None  # only the latest planned heartbeat runs
        self._beat_at = 0.0
        self.drain_started: float | None = None
        self.killed_at_deadline = False
        self.crashed = False  # the process ended (its watchdog, a crash): not the pod
        self._watch_at: float | None = None
        self._plan_heartbeat(0.0)

    def clock(self) -> float:
        return self.world.now + self.offset

    def wall(self) -> float:
        """The wall clock, for records' ages: exact (a skewed one is not simulated)."""
        return wall(self.world.now).timestamp()

    # --- scheduling, with pauses and death -----------------------------------------------

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        run_in_process(self.world, delay, callback, lambda: self.alive, lambda: self.paused_until)

    def pause(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, self.world.now + seconds)
        self.ledger.paused(self.name)

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            for running in self.running.values():
                if running.delivery is not None:
                    self.ledger.end(running.delivery)
            self.on_exit(self)

    def drain(self) -> None:
        if self.drain_started is None:
            self.drain_started = self.world.now
            self.core.drain(self.clock())
            self._wake_heartbeat()

    # --- heartbeats -------------------------------------------------------------------

    def _wake_heartbeat(self) -> None:
        if not self._beating:
            self._plan_heartbeat(0.0)

    def _plan_heartbeat(self, delay: float) -> None:
        when = self.world.now + delay
        if self._planned is not None and self._beat_at <= when:
            return  # one is planned sooner already
        plan = self._planned = next(self._plans)
        self._beat_at = when
        self.schedule(delay, lambda: self._heartbeat(plan))

    def _heartbeat(self, plan: int) -> None:
        if plan != self._planned or self._beating:
            return
        self._planned = None
        self._beating = True
        request = self.core.heartbeat(self.clock())
        self._check_blocked_reported(request)
        sent_at = self.clock()
        self.request(
            self.core.request_timeout,
            HEARTBEAT,
            request,
            lambda reply: self._answered_heartbeat(reply, sent_at),
        )

    def _check_blocked_reported(self, request: HeartbeatRequest) -> None:
        """A shard held up by a dead letter that cannot be written is blocked: the
        operator's Degraded must name it and the record, never a silent stall."""
        now = self.clock()
        for held in request.held:
            running = self.running.get(held.shard_id)
            if running is None or running.unwritable is None or running.machine.hung(now):
                continue  # (a hung call is reported blocked as such)
            failing = held.failing
            named = f"record {running.unwritable} "
            if failing is None or not failing.blocked or named not in failing.error:
                raise Violation(
                    f"{self.name}: {held.shard_id} stalls on a dead letter too large for its "
                    f"target (record {running.unwritable}) and does not report itself blocked "
                    f"({failing})"
                )

    def _answered_heartbeat(self, reply: tuple[int, bytes] | None, sent_at: float) -> None:
        """As the runtime's heartbeat thread, reading the answer's bytes as it does."""
        self._beating = False
        try:
            if reply is None:
                raise OperatorUnavailable("no answer")
            response = heartbeat_answer(*reply)
        except (OperatorUnavailable, OperatorRefused) as error:
            refused = str(error) if isinstance(error, OperatorRefused) else None
            self.core.failed(refused, self.clock())
        else:
            started, resend = self.core.answered(response, sent_at, self.clock())
            for machine in started:
                reader = self.source.open_reader(machine.shard_id, machine.assignment.start)
                self.running[machine.shard_id] = Running(self, machine, reader)
            for request in resend:
                self.request(self.core.request_timeout, CHECKPOINT, request, lambda _: None)
            for running in list(self.running.values()):
                self.poke(running)
                self.read(running)
        if self.core.done(self.clock()):
            if self.core.machines and self.drain_started is not None and not self.crashed:
                self.killed_at_deadline = True  # the pod's grace period ran out
            self.kill()
            return
        interval = self.core.interval
        if self.core.draining and self.core.machines:
            interval = min(interval, 0.25)
        self._plan_heartbeat(interval)

    # --- requests over the network ------------------------------------------------------

    def request(
        self,
        timeout: float,
        path: str,
        message: WireModel,
        receive: Callable[[tuple[int, bytes] | None], None],
    ) -> None:
        """One request as JSON bytes: delivered (or lost) to the operator, answered (or
        lost) back, timing out at the worker. `receive` gets the reply's status and
        bytes, or None for no answer. A newer worker's wire adds a field and says a
        newer version."""
        headers = request_headers(worker_pod(self.name))  # a pod's token, for each process
        body = message.wire()
        if self.operator.newer_peers:
            headers[WIRE_VERSION_HEADER] = str(WIRE_VERSION + 1)
            body |= FROM_A_NEWER_WORKER
        content = json.dumps(body).encode()

        def send(respond: Callable[[tuple[int, bytes]], None]) -> None:
            self.operator.call(self.name, path, headers, content, respond)

        settled = False

        def settle(answer: tuple[int, bytes] | None) -> None:
            nonlocal settled
            if not settled:
                settled = True
                receive(answer)

        def timed_out() -> None:
            if not settled:  # as httpx: a connection whose answer timed out is closed
                self.operator.disconnect(self.name)
                settle(None)

        self.schedule(timeout, timed_out)
        going = self.network.transit(self.name)
        if going is None:
            return

        def arrive() -> None:
            if not self.operator.up:
                return

            def respond(answer: tuple[int, bytes]) -> None:
                coming = self.network.transit(self.name)
                if coming is not None:
                    self.schedule(coming, lambda: settle(answer))

            send(respond)

        self.world.after(going, arrive)

    # --- shards -----------------------------------------------------------------------

    def poke(self, running: Running) -> None:
        if not running.stepping:
            running.stepping = True
            self.schedule(0.0, lambda: self._step(running))

    def _step(self, running: Running) -> None:
        running.stepping = False
        running.driver.drive()

    def finished(self, running: Running) -> None:
        machine = running.machine
        if self.running.get(machine.shard_id) is running:
            self.core.finished(machine)
            del self.running[machine.shard_id]
            self._wake_heartbeat()

    def fanout(self, calls: Sequence[GroupCall]) -> list[int | Exception]:
        """The groups of a parallel call, one after another in a random order (any order
        is one the runtime's threads may finish in); the ledger's Violation goes through."""
        order = list(range(len(calls)))
        self.world.rng.shuffle(order)
        outcomes: dict[int, int | Exception] = {}
        for index in order:
            try:
                outcomes[index] = calls[index]()
            except Violation:
                raise
            except Stopped as stopped:
                if isinstance(stopped.cause, Violation):
                    raise stopped.cause from None
                outcomes[index] = stopped
            except Exception as error:
                outcomes[index] = error
        return [outcomes[index] for index in range(len(calls))]

    # --- the watchdog ---------------------------------------------------------------------

    def watch(self) -> None:
        """As the runtime's watchdog: a call past its fence ends the process; a hung call
        drains the other shards first (the next heartbeat says so)."""
        hung_before = self.core.hung
        check_at = self.core.watch(self.clock())
        if self.core.overran is not None:
            self.crashed = True
            self.kill()
            return
        if self.core.hung is not None and hung_before is None:
            self.crashed = True
            self._wake_heartbeat()
        if check_at is not None and (self._watch_at is None or check_at < self._watch_at):
            self._watch_at = check_at
            self.schedule(max(0.0, check_at - self.clock()) + 1e-6, self._watched)

    def _watched(self) -> None:
        self._watch_at = None
        self.watch()

    def read(self, running: Running) -> None:
        machine = running.machine
        if running.reading or machine.outcome is not None or not machine.wants_read():
            return
        running.reading = True
        self.schedule(self.world.rng.uniform(0.002, 0.02), lambda: self._got(running))

    def _got(self, running: Running) -> None:
        running.reading = False
        machine = running.machine
        if machine.outcome is not None or not machine.wants_read():
            return
        machine.reading(self.clock(), self.wall())
        try:
            result = running.reader.read()
        except ShardGone:
            running.read_failures += 1
            running.reading = True
            delay = min(10.0, 0.2 * 2 ** min(running.read_failures, 6))
            self.schedule(delay, lambda: self._got(running))
            return
        running.read_failures = 0
        assert self.trouble is not None
        if self.trouble.early_ends and not result.shard_end:
            self.trouble.early_ends -= 1
            self.ledger.ended_early.add(machine.shard_id)
            result = ReadResult(result.records, 0, shard_end=True)
        machine.read(result, now=self.clock())
        self.poke(running)
        if result.records:
            self.read(running)
        elif not result.shard_end:
            running.reading = True
            self.schedule(IDLE_READ, lambda: self._got(running))
