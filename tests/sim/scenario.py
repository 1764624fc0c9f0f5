"""One simulated run: a consumer on a stream with background puts, a schedule of faults
applied at their times, then a quiet period in which everything must catch up.

`simulate(run)` raises Violation at the first breach of an invariant; otherwise it
checks the end state (nothing lost; no duplicate unless a worker was killed or paused
or the network lost messages; finished leases collected; departed workers gone) and
returns what happened."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.ledger import Ledger, Violation
from sim.operator import SimApiServer, SimOperators
from sim.stream import KEYS, SimSource, SimStream
from sim.worker import (
    DRAIN_SECONDS,
    SLOW_CALL_SECONDS,
    AsyncRecorder,
    Recorder,
    SimWorker,
    Sink,
    Trouble,
    stepped,
)
from sim.world import Network, World, wall
from streamconsumer.awaiting import AwaitingProcessor
from streamconsumer.controller.leases.lease_groups import Layout
from streamconsumer.core.lineage import SHARD_END
from streamconsumer.models.api import (
    MAX_CHECKPOINT_HOLD_SECONDS,
    process_worker,
    worker_pod,
    worker_process,
)
from streamconsumer.models.resource import (
    RESET_ANNOTATION,
    ResetPosition,
    ResetRequest,
    StreamConsumerSpec,
)
from streamconsumer.processor import RecordProcessor
from streamconsumer.worker.core import MAX_REQUEST_SECONDS
from streamconsumer.worker.processes import PodProcesses

SETTLE = 90.0  # the quiet period after the faults, in which everything must be processed
LEASES = (3.0, 4.0, 6.0, 10.0)
POLICY_RETRIES = 2
CALL_TIMEOUT = 15.0  # processor.onFailure.timeoutSeconds: some slow calls are hung
PAUSE_STRETCH = 4.0  # a pause lasts 4 times a fault's seconds: long enough to settle
LARGE_RECORD = 200 * 1024  # over QUEUE_LIMIT as a dead letter (base64 in JSON)

# Faults after which a record may be processed twice (duplicates only in the window since
# the last checkpoint, docs/design.md#hand-off-on-planned-moves); every other fault must
# cause none.
UNPLANNED = {"worker_crash", "worker_pause", "partition", "net_loss", "reset"}
# Planned faults in which the operator cannot answer or save.
OPERATOR_OUTAGES = {
    "operator_crash",
    "operator_pause",
    "lease_slow",
    "lease_deleted",
    "status_errors",
    "status_slow",
}
PLANNED = OPERATOR_OUTAGES | {
    "split",
    "restream",
    "merge",
    "scale",
    "lease",
    "listing_errors",
    "listing_slow",
    "flaky",
    "poison",
    "partial",
    "sink_errors",
    "slow_calls",
    "hang",
    "net_slow",
    "retention",
    "pause",
    "large_poison",
    "early_end",
}
KINDS = tuple(sorted(UNPLANNED | PLANNED))
# Faults during which a drain may not finish in time: the operator cannot answer or save,
# or the worker cannot reach it (and slow processor calls, below).
OUTAGES = OPERATOR_OUTAGES | {"worker_pause", "partition", "net_loss"}


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    arg: int = 0
    seconds: float = 1.0


@dataclass(frozen=True)
class Run:
    seed: int
    shards: int = 2
    replicas: int = 2
    lease: float = 6.0
    processor: str = "recorder"  # recorder | sink
    checkpoint_every: int = 1  # recorder: every n batches; 0: only on shard end / hand-off
    faults: tuple[Fault, ...] = ()
    duration: float = 60.0
    puts_per_second: float = 6.0
    # The lag autoscaler owns the worker count (minReplicas 0): it must bring workers
    # back when records arrive with none running.
    autoscale: bool = False
    initial_position: str = "TRIM_HORIZON"  # TRIM_HORIZON | LATEST
    on_failure: str = "block"  # block | skip | deadLetter, after POLICY_RETRIES
    max_record_age: float | None = None  # onFailure.maxRecordAgeSeconds (not with block)
    filtered: bool = False  # processor.filter drops the records of partition key k0
    history: int = 0  # records in the stream before the consumer is created
    operators: int = 1  # operator replicas, one leading at a time
    newer_peers: bool = False  # each side's messages carry fields of a newer release
    stuck_seconds: float | None = None  # leases.stuckShardSeconds (None: the default)
    parallelism: int = 1  # processor.parallelism (a sink runs with 1 all the same)
    batch_size: int | None = None  # processor.batchSize (a sink takes whole reads)
    asynchronous: bool = False  # the recorder written async (streamconsumer.awaiting)
    processes: int = 1  # processor.processes: worker processes per pod
    # Tables past 2 entries kept in this many lease groups (0: in the status, as at 1,000).
    lease_groups: int = 0
    batching_window: float = 0.0  # reading.maxBatchingWindowSeconds
    end: float | None = None  # spec.end, in simulated seconds (None: the consumer never ends)


@dataclass
class Outcome:
    steps: int
    faults: Counter[str]
    records: int
    duplicates: int
    expired: int
    deliveries: int
    operator_restarts: int
    workers_started: int
    status_writes: int


GRACE_PERIOD = 30.0  # the pod's terminationGracePeriodSeconds


class Deployment:
    """The ReplicaSet: keeps `replicas` live pods, replaces dead ones, drains the newest
    on scale-down and kills a draining pod's processes after its grace period. A pod
    runs `processes` workers (processor.processes: `pod#0`, `pod#1`...; one named as its
    pod otherwise), supervised by the worker's own PodProcesses: when a process ends by
    itself the others drain. A pod whose process ended by itself (its watchdog) or crashed
    (some worker_crash faults) is restarted, as the kubelet restarts a container: new
    processes under the same names; other dead pods are replaced."""

    def __init__(
        self,
        world: World,
        spawn: Callable[[str], SimWorker],
        replicas: int,
        processes: int = 1,
    ) -> None:
        self.world = world
        self.spawn = spawn
        self.replicas = replicas
        self.processes = processes
        self.workers: list[SimWorker] = []
        self.started = 0
        self._supervisors: dict[str, PodProcesses] = {}  # by pod, while a process runs
        self._restart_pods: set[str] = set()  # pods of this incarnation a process crashed in
        self._dying: set[str] = set()  # pods being killed whole
        self._deleting: dict[str, float] = {}  # pods scaled down: since when

    def _pods(self) -> dict[str, list[SimWorker]]:
        """The pods with a process running, and those processes."""
        pods: dict[str, list[SimWorker]] = {}
        for worker in self.workers:
            if worker.alive:
                pods.setdefault(worker_pod(worker.name), []).append(worker)
        return pods

    def live(self) -> list[str]:
        """The pods running, not being deleted, none of their processes draining."""
        return [
            pod
            for pod, processes in self._pods().items()
            if pod not in self._deleting and all(w.drain_started is None for w in processes)
        ]

    @staticmethod
    def _index(worker: SimWorker) -> int:
        return worker_process(worker.name)[1] or 0  # (None: the pod's one worker)

    def _start(self, pod: str) -> None:
        self._supervisors[pod] = PodProcesses(self.processes, DRAIN_SECONDS)
        if self.processes == 1:
            self.workers.append(self.spawn(pod))
            return
        for index in range(self.processes):
            self.workers.append(self.spawn(process_worker(pod, index)))

    def reconcile(self) -> None:
        live = self.live()
        while len(live) < self.replicas:
            self.started += 1
            pod = f"worker-{self.started}"
            self._start(pod)
            live.append(pod)
        while len(live) > self.replicas:
            self._delete(live.pop())

    def _delete(self, pod: str) -> None:
        """The kubelet's SIGTERM, to the pod's supervisor: it passes it on; the kubelet kills
        what still runs at the end of the grace period."""
        self._deleting[pod] = self.world.now
        supervisor = self._supervisors[pod]
        self._terminate(pod, supervisor.drain(self.world.now))
        self.world.after(GRACE_PERIOD, functools.partial(self._kill, pod, supervisor, False))

    def _terminate(self, pod: str, indexes: list[int]) -> None:
        for worker in self._pods().get(pod, []):
            if self._index(worker) in indexes:
                worker.drain()

    def deleted_at(self, worker: SimWorker) -> float | None:
        """When `worker`'s pod began to be deleted (a planned move), if it is."""
        return self._deleting.get(worker_pod(worker.name))

    def _kill(self, pod: str, supervisor: PodProcesses, by_supervisor: bool) -> None:
        """The kubelet kills the pod's processes, or the supervisor those overdue in their
        drain."""
        if self._supervisors.get(pod) is not supervisor:
            return  # that incarnation of the pod has ended
        overdue = supervisor.overdue(self.world.now)
        for worker in self._pods().get(pod, []):
            if not by_supervisor or self._index(worker) in overdue:
                worker.killed_at_deadline = True
                worker.kill()

    def exited(self, worker: SimWorker) -> None:
        pod = worker_pod(worker.name)
        if worker.crashed:
            self._restart_pods.add(pod)
        supervisor = self._supervisors[pod]
        planned = worker.drain_started is not None and not worker.killed_at_deadline
        status = 0 if planned and not worker.crashed else 1
        others = supervisor.ended(self._index(worker), status, self.world.now)
        if others and pod not in self._dying:  # (not killed with it)
            self._terminate(pod, others)
            assert supervisor.kill_at is not None
            kill = functools.partial(self._kill, pod, supervisor, True)
            self.world.at(supervisor.kill_at, kill)
        if not supervisor.done:
            return
        del self._supervisors[pod]
        self._deleting.pop(pod, None)
        # Pods are replaced a little later, as a ReplicaSet does.
        later = self.world.rng.uniform(0.5, 2.0)
        if pod in self._restart_pods:
            self._restart_pods.discard(pod)
            self.world.after(later, functools.partial(self._restart, pod))
        else:
            self.world.after(later, self.reconcile)

    def _restart(self, pod: str) -> None:
        if len(self.live()) < self.replicas:
            self._start(pod)
        self.reconcile()

    def kill_pod(self, worker: SimWorker) -> None:
        """`worker`'s pod dies with every process in it (a node lost, the container
        killed): none of them is drained by the supervisor first."""
        pod = worker_pod(worker.name)
        self._dying.add(pod)
        for process in self._pods().get(pod, []):
            process.kill()
        self._dying.discard(pod)


class Simulation:
    def __init__(self, run: Run) -> None:
        self.run = run
        world = self.world = World(run.seed)
        self.stream = SimStream(world, run.shards)
        self.stream.put(run.history, arrival=-1.0)
        self.ledger = Ledger(
            self.stream,
            from_latest=run.initial_position == "LATEST",
            retries=None if run.on_failure == "block" else POLICY_RETRIES,
        )
        on_failure: dict[str, Any] = {
            "retries": POLICY_RETRIES,
            "then": run.on_failure,
            "timeoutSeconds": CALL_TIMEOUT,
        }
        if run.max_record_age is not None and run.on_failure != "block":
            on_failure["maxRecordAgeSeconds"] = self.ledger.max_record_age = run.max_record_age
        if run.on_failure == "deadLetter":
            on_failure["deadLetter"] = {"sqs": {"queueURL": "http://sim/dead-letters"}}
        processor: dict[str, Any] = {"image": "i", "entrypoint": "m:f", "onFailure": on_failure}
        if run.parallelism > 1:
            processor["parallelism"] = run.parallelism
            if run.processor != "sink":  # (which takes one call at a time)
                self.ledger.key_of = lambda sequence: sequence % KEYS
        if run.batch_size is not None:
            processor["batchSize"] = run.batch_size
        if run.processes > 1:
            processor["processes"] = run.processes
        if run.filtered:
            kept = [f"k{n}" for n in range(1, KEYS)]
            processor["filter"] = {"patterns": [{"partitionKey": {"equalsAny": kept}}]}
            self.ledger.filtered = lambda sequence: sequence % KEYS == 0
        spec = {
            "source": {"kinesis": {"streamName": "sim"}},
            "processor": processor,
            "replicas": run.replicas,
            "leases": {
                "durationSeconds": run.lease,
                **({"stuckShardSeconds": run.stuck_seconds} if run.stuck_seconds else {}),
            },
            "initialPosition": run.initial_position,
        }
        if run.batching_window:
            spec["reading"] = {"maxBatchingWindowSeconds": run.batching_window}
        if run.end is not None:
            spec["end"] = {"timestamp": wall(run.end).isoformat()}
            self.ledger.end_at = run.end
        if run.autoscale:
            spec["autoscaling"] = {
                "minReplicas": 0,
                "maxReplicas": 4,
                "targetLagSeconds": 5,
                "scaleUpStabilizationSeconds": 0,
                "scaleDownStabilizationSeconds": 10,
            }
        self.api = SimApiServer(world, self.ledger, spec)
        self.source = SimSource(self.stream)
        self.operator = SimOperators(
            world,
            self.api,
            self.source,
            self.ledger,
            self._autoscaled,
            self._deployment if run.autoscale or run.end is not None else None,
            run.operators,
            newer_peers=run.newer_peers,
            layout=Layout(inline_max_shards=2, groups=run.lease_groups, log_group_shards=1)
            if run.lease_groups
            else Layout(),
        )
        self.network = Network(world)
        self.trouble = Trouble(world)
        self.deployment = Deployment(world, self._spawn, run.replicas, run.processes)
        self.faults: Counter[str] = Counter()
        self.outages: list[tuple[float, float]] = []  # operator unable to answer or save
        self.killed: list[str] = []

    def _autoscaled(self, replicas: int) -> None:
        self.deployment.replicas = replicas
        self.deployment.reconcile()

    def _deployment(self) -> dict[str, Any]:
        live = len(self.deployment.live())
        return {
            "spec": {"replicas": self.deployment.replicas},
            "status": {"availableReplicas": live},
        }

    def _spawn(self, name: str) -> SimWorker:
        def processor(worker: SimWorker) -> RecordProcessor:
            if self.run.processor == "sink":
                return Sink(self.ledger, self.trouble, worker.clock)
            recorder = Recorder(self.ledger, self.trouble, self.run.checkpoint_every)
            if self.run.asynchronous:
                return AwaitingProcessor(AsyncRecorder(recorder), run=stepped)
            return recorder

        spec = StreamConsumerSpec.model_validate(self.api.spec)  # as the pod's env has it
        worker = SimWorker(
            self.world,
            name,
            self.network,
            self.operator,
            self.source,
            self.ledger,
            processor,
            wants_empty=self.run.processor == "sink",
            on_exit=self._exited,
            policy=spec.processor.on_failure,
            record_filter=spec.processor.filter,
            parallelism=spec.processor.parallelism,
            batch_size=spec.processor.batch_size,
            reading=spec.reading,
        )
        worker.trouble = self.trouble
        return worker

    def _exited(self, worker: SimWorker) -> None:
        if worker.killed_at_deadline or worker.drain_started is None or worker.crashed:
            self.killed.append(worker.name)
        # A drain, or its pod's deletion (SIGTERM that its supervisor must pass on).
        planned_since = worker.drain_started
        if planned_since is None:
            planned_since = self.deployment.deleted_at(worker)
        if worker.killed_at_deadline and planned_since is not None:
            drain = (planned_since, self.world.now)
            if not any(start < drain[1] and end > drain[0] for start, end in self.outages):
                raise Violation(
                    f"{worker.name}: a planned move did not finish within the grace period "
                    "although the operator was up and saving"
                )
        self.deployment.exited(worker)

    # --- faults --------------------------------------------------------------------------

    def _apply(self, fault: Fault) -> None:
        now = self.world.now
        self.faults[fault.kind] += 1
        if fault.kind in UNPLANNED:
            self.ledger.unplanned.append(fault.kind)
        until = now + fault.seconds
        if fault.kind in OUTAGES:
            # A request lost near its end may be waited for a whole client timeout.
            longest_wait = MAX_REQUEST_SECONDS + MAX_CHECKPOINT_HOLD_SECONDS
            self.outages.append((now, until + longest_wait + 1.0))
        if fault.kind == "slow_calls":  # a drain waits for the calls under way
            self.outages.append((now, until + 2 * SLOW_CALL_SECONDS))
        workers = [w for w in self.deployment.workers if w.alive]
        victim = workers[fault.arg % len(workers)] if workers else None
        match fault.kind:
            case "split":
                self.stream.split(fault.arg)
            case "merge":
                self.stream.merge(fault.arg)
            case "restream":
                self.stream.replace_stream(fault.arg)
            case "retention":
                self.stream.expire(retention=fault.seconds)
            case "scale" if self.run.autoscale:  # `kubectl scale` of the workers' Deployment
                self._autoscaled(fault.arg % 5)  # by hand: the autoscaler must set it back
            case "scale":
                self.deployment.replicas = fault.arg % 5
                self.api.edit_spec(replicas=self.deployment.replicas)
                self.deployment.reconcile()
            case "lease":
                self.api.edit_spec(**{"leases.durationSeconds": LEASES[fault.arg % len(LEASES)]})
                self.operator.spec_changed()
            case "reset":  # `streamconsumer reset --to trim-horizon | timestamp`
                back = None if fault.arg % 2 == 0 else wall(now - fault.seconds * 3)
                request = ResetRequest(id=f"r{now}", to=ResetPosition(timestamp=back))
                self.api.annotations[RESET_ANNOTATION] = request.model_dump_json(by_alias=True)
                self.operator.reset_requested()
            case "pause":  # `streamconsumer pause`, then `resume` after a while
                self._set_paused(True)
                resume = functools.partial(self._set_paused, False)
                self.world.after(fault.seconds * PAUSE_STRETCH, resume)
            case "operator_crash":
                self.operator.target(fault.arg).crash(downtime=fault.seconds)
            case "operator_pause":  # a process pause: SIGSTOP, a long GC, a starved node
                self.operator.target(fault.arg).freeze(fault.seconds)
            case "lease_slow":  # Lease calls come back late, renewals past their deadline
                self.operator.lease.slow_until = until
            case "lease_deleted":
                self.operator.lease.delete()
            case "status_errors":
                self.api.failing_until = until
                self.api.failure = ("unavailable", "lost_answer", "invalid")[fault.arg % 3]
            case "status_slow":  # an apiserver under load: writes land late, or after a crash
                self.api.slow_until = until
            case "listing_errors":
                self.operator.faults.listing_failing_until = until
            case "listing_slow":
                self.operator.faults.listing_slow_until = until
            case "flaky":
                self.trouble.flaky_until = until
            case "partial":  # flaky, and failures told as partial batch responses
                self.trouble.flaky_until = max(self.trouble.flaky_until, until)
                self.trouble.partial_until = until
            case "poison":  # the shard's first record not yet done, or its next one
                open_shards = self.stream.open_shards()
                if open_shards:
                    shard = open_shards[fault.arg % len(open_shards)]
                    done = [s for s in shard.sequences if self.ledger.done_times[s]]
                    self.trouble.poison[shard.id] = done[-1] if done else 0
                    self.trouble.poison_until = max(self.trouble.poison_until, until)
            case "large_poison":  # a record too large to dead-letter, failing until `until`
                open_shards = self.stream.open_shards()
                if open_shards:
                    shard = open_shards[fault.arg % len(open_shards)]
                    sequence = self.stream.put_large(shard, LARGE_RECORD)
                    self.trouble.poison[shard.id] = sequence - 1
                    self.trouble.poison_until = max(self.trouble.poison_until, until)
            case "sink_errors":
                self.trouble.sink_failing_until = until
            case "slow_calls":
                self.trouble.slow_until = until
            case "hang":  # the next call never returns (the shard's next owner is spared)
                self.trouble.hangs += 1
            case "early_end":  # a worker's reader ends an open shard: it sends SHARD_END
                self.trouble.early_ends += 1
            case "net_slow":
                self.network.slow_until = until
                self.network.slow_delay = 0.5
            case "worker_crash":
                if victim is not None:
                    victim.crashed = fault.arg % 3 == 2  # the process, not the pod
                    # The pod (a node lost, an OOM kill of the container) takes every
                    # process in it; a process crashes alone and its supervisor drains
                    # the rest.
                    if victim.crashed:
                        victim.kill()
                    else:
                        self.deployment.kill_pod(victim)
            case "worker_pause":
                if victim is not None:
                    victim.pause(fault.seconds)
            case "partition":
                if victim is not None:
                    self.network.link(victim.name).cut_until = until
            case "net_loss":
                self.network.lossy_until = until
                self.network.loss = 0.3
            case _:
                raise ValueError(fault.kind)

    def _set_paused(self, paused: bool) -> None:
        if paused and not self.api.spec.get("paused"):
            self.ledger.paused_since = self.world.now
        elif not paused:
            self.ledger.paused_since = None
        self.api.edit_spec(paused=paused)
        self.operator.spec_changed()

    def _heal(self) -> None:
        """The end of the faults: everything works again, at least one worker runs."""
        now = self.world.now
        self.api.failing_until = self.network.slow_until = self.network.lossy_until = now
        self.api.slow_until = now
        faults = self.operator.faults
        faults.listing_failing_until = faults.listing_slow_until = now
        self.operator.lease.slow_until = now
        self.trouble.flaky_until = self.trouble.poison_until = now
        self.trouble.sink_failing_until = self.trouble.slow_until = now
        self.trouble.hangs = self.trouble.early_ends = 0
        for link in self.network.links.values():
            link.cut_until = now
        if self.api.spec.get("paused"):
            self._set_paused(False)
        complete = self.run.end is not None and self.operator.completed()
        if self.deployment.replicas == 0 and not self.run.autoscale and not complete:
            self.deployment.replicas = 1
            self.deployment.reconcile()

    def _put(self) -> None:
        if self.world.now < self.run.duration:
            self.stream.put(self.world.rng.randint(0, int(self.run.puts_per_second)))
            self.world.after(1.0, self._put)

    # --- the run -------------------------------------------------------------------------

    def simulate(self) -> Outcome:
        run, world = self.run, self.world
        self.operator.start()
        self.deployment.reconcile()
        world.after(0.5, self._put)
        for fault in run.faults:
            world.at(fault.at, functools.partial(self._apply, fault))
        world.run_until(run.duration)
        self._heal()
        world.run_until(run.duration + SETTLE)
        self._check_end()
        return Outcome(
            steps=world.steps,
            faults=self.faults,
            records=sum(len(s.sequences) for s in self.stream.shards.values()),
            duplicates=self.ledger.duplicates(),
            expired=self.ledger.expired(),
            deliveries=self.ledger.deliveries,
            operator_restarts=self.operator.restarts,
            workers_started=self.deployment.started,
            status_writes=self.api.writes,
        )

    def _check_end(self) -> None:
        ledger = self.ledger
        lost = ledger.lost()
        if lost:
            raise Violation(f"{len(lost)} records never processed, first {lost[:5]}")
        excused = ledger.unplanned or self.killed
        if ledger.duplicates(planned=True) and not excused:
            raise Violation(
                f"{ledger.duplicates(planned=True)} duplicates although every fault was planned"
            )
        status = self.api.logical_status()
        listed = {s.id for s in self.stream.listing()}
        leases = status.get("leases") or {}
        if not set(leases) <= listed:
            raise Violation(f"leases of shards gone from the stream: {set(leases) - listed}")
        for shard_id, lease in leases.items():
            children = self.stream.children(shard_id)
            if (
                lease.get("checkpoint") == SHARD_END
                and children
                and all(c in leases and leases[c].get("epoch", 0) > 0 for c in children)
            ):
                raise Violation(f"{shard_id}: finished and its children started, still listed")
        if self.run.end is not None:
            self._check_complete(status)
        alive = {w.name for w in self.deployment.workers if w.alive}
        departed = set(status.get("workers") or {}) - alive
        if departed:
            raise Violation(f"departed workers still listed: {sorted(departed)}")

    def _check_complete(self, status: dict[str, Any]) -> None:
        """A bounded consumer is Complete once the faults are over, its workers scaled to
        zero (and none of its records past the end delivered: the ledger's watch)."""
        complete = [c for c in status.get("conditions") or [] if c["type"] == "Complete"]
        if not complete or complete[0]["status"] != "True":
            raise Violation(f"a bounded consumer not Complete after the faults: {complete}")
        if self.deployment.replicas or self.deployment.live():
            raise Violation(f"Complete with workers: {self.deployment.live()}")


def simulate(run: Run) -> Outcome:
    return Simulation(run).simulate()
