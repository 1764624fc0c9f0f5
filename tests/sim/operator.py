"""The simulated operator: replicas (processes in pods) that campaign with the
production Election and ElectionDriver against a simulated Lease, follow the production
Lifecycle, and, while they lead, run the production ConsumerDriver (loaded by the
production `load`) the way kopf runs a daemon (a daemon that returned is not restarted).
Every job (Lease reads and swaps, listings, status writes) runs on the event queue
(`SimJobs`): its call lands when its latency has passed, whether or not its caller still
waits, and a crashed or frozen process does not stop what it already sent. A crash loses
everything but what the apiserver holds; a restart is a standby again. Workers reach a
replica through a Service that follows the leader label, over keep-alive connections."""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection
from dataclasses import InitVar, dataclass, field
from typing import Any, TypeVar

from sim.ledger import Ledger, Violation
from sim.stream import SimSource
from sim.world import EPOCH, World, run_in_process, wall
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.driver import ConsumerDriver, Timeouts, load
from streamconsumer.controller.consumer.jobs import Job, Outcome
from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.election.leadership import ElectionDriver, LockConflict
from streamconsumer.controller.election.lifecycle import Lifecycle, Phase
from streamconsumer.controller.leases.lease_groups import (
    GroupedStatusApi,
    Layout,
    StoredGroup,
    Writer,
    names_of,
    read_stored,
)
from streamconsumer.controller.leases.status import (
    Conflict,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
)
from streamconsumer.controller.names import worker_service_account
from streamconsumer.controller.worker_api import answers
from streamconsumer.controller.worker_api.answers import ROUTES, Reply
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.controller.workloads.worker_health import (
    DEPLOYMENT_CHECK_SECONDS,
    deployment_replicas,
)
from streamconsumer.core.election import Action, Election, ElectionTiming, LeaseRecord
from streamconsumer.models.api import WIRE_VERSION_HEADER
from streamconsumer.models.resource import ResetRequest, StreamConsumerSpec

T = TypeVar("T")
NAME, NAMESPACE = "sim", "sim"
TICK = 0.2  # the runner's idle loop period
# What a newer release may add to the wire: each side must take it and go on.
FROM_A_NEWER_OPERATOR = {"leaseHints": {"rebalanceAfterMs": 5000}, "operatorBuild": "next"}
STARTUP_GRACE = OperatorConfig.model_fields["startup_grace_seconds"].default
TIMEOUTS = Timeouts(listing=30.0, status_write=10.0, scale=10.0)
WRITE_LATENCY = (0.002, 0.03)
SLOW_WRITE_LATENCY = (2.0, 25.0)  # an apiserver under load: some land past the timeout


@dataclass
class SimApiServer:
    """One StreamConsumer object with a resourceVersion; writes can be made to fail."""

    world: World
    ledger: Ledger
    spec: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    failing_until: float = -1.0
    failure: str = "unavailable"  # unavailable | lost_answer | invalid
    slow_until: float = -1.0
    writes: int = 0
    annotations: dict[str, str] = field(default_factory=dict)
    lease_groups: SimLeaseGroups = field(init=False)

    def __post_init__(self) -> None:
        self.lease_groups = SimLeaseGroups(self)

    def get(self) -> dict[str, Any]:
        return copy.deepcopy(
            {
                "metadata": {
                    "name": NAME,
                    "namespace": NAMESPACE,
                    "annotations": self.annotations,
                    "resourceVersion": str(self.version),
                    "creationTimestamp": EPOCH.isoformat().replace("+00:00", "Z"),
                },
                "spec": self.spec,
                "status": self.status,
            }
        )

    def logical_status(self) -> dict[str, Any]:
        """The status with its lease table inline, wherever it is kept."""
        logical, _ = read_stored(self.status, self.lease_groups)
        return self.status if logical is None else logical

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        failing = self.world.now < self.failing_until
        if failing and self.failure == "unavailable":
            raise StatusUnavailable("HTTP 500: etcd leader changed")
        if failing and self.failure == "invalid":
            raise StatusInvalid("status.leases: Too many properties")
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise Conflict("the object has been modified")
        self.status = copy.deepcopy(body["status"])
        self.version += 1
        self.writes += 1
        self.ledger.saved(self.logical_status())
        if failing and self.failure == "lost_answer":
            raise StatusUnavailable("timed out (the write landed)")
        return self.get()

    def edit_spec(self, **changes: Any) -> None:
        for path, value in changes.items():
            target = self.spec
            *parents, leaf = path.split(".")
            for key in parents:
                target = target.setdefault(key, {})
            target[leaf] = value
        self.version += 1


@dataclass
class SimLeaseGroups:
    """The lease groups' ConfigMaps (controller/leases/lease_groups.py) on the same apiserver:
    a creation fails, or lands unanswered, while status writes do."""

    api: SimApiServer
    groups: dict[str, tuple[str, Writer]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def create(self, name: str, content: str, written_by: Writer) -> None:
        api = self.api
        failing = api.world.now < api.failing_until
        if failing and api.failure == "unavailable":
            raise StatusUnavailable("HTTP 500: etcd leader changed")
        if name in self.groups or name in self.deleted:
            raise StatusInvalid(f"configmaps {name!r} already exists")
        self.groups[name] = (content, written_by)
        if failing and api.failure == "lost_answer":
            raise StatusUnavailable("timed out (the group was created)")

    def read(self, name: str) -> str | None:
        found = self.groups.get(name)
        return found[0] if found else None

    def contents(self, names: Collection[str]) -> dict[str, str]:
        return {name: content for name, (content, _) in self.groups.items() if name in names}

    def delete(self, name: str) -> None:
        referenced = names_of(read_stored(self.api.status, self)[1])
        if self.groups.pop(name, None) is not None:
            self.deleted.add(name)
            if name in referenced:
                raise Violation(f"lease group {name} deleted while the status references it")

    def listed(self) -> list[StoredGroup]:
        return [StoredGroup(name, by) for name, (_, by) in sorted(self.groups.items())]


class SimJobs:
    """The drivers' Jobs on the event queue. `alive` is the process that started them:
    a dead process hears of nothing, but what it sent still lands; `deliver` runs an
    outcome in that process (later, if it is frozen)."""

    def __init__(
        self,
        world: World,
        latency: Callable[[str], float],
        alive: Callable[[], bool],
        deliver: Callable[[Callable[[], None]], None],
    ) -> None:
        self._world = world
        self._latency = latency
        self._alive = alive
        self._deliver = deliver

    def start(self, job: Job[Any]) -> None:
        settled = False

        def settle(outcome: Outcome[Any]) -> None:
            nonlocal settled
            if settled or not self._alive():
                return
            settled = True
            self._deliver(lambda: job.done(outcome))

        def land() -> None:
            try:
                outcome: Outcome[Any] = Outcome(value=job.call())
            except Violation:
                raise  # the ledger's check inside the simulated apiserver: not an I/O error
            except Exception as error:
                outcome = Outcome(error=error)
            settle(outcome)

        self._world.after(self._latency(job.kind), land)
        self._world.after(job.timeout, lambda: settle(Outcome(error=TimeoutError())))


class SimLease:
    """The operators' coordination.k8s.io Lease: a compare-and-swap record (the
    production LeaseLock protocol). It can be deleted, and its calls made slow."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.record: LeaseRecord | None = None
        self.versions = 0
        self.slow_until = -1.0

    def get(self) -> LeaseRecord | None:
        return self.record

    def swap(self, action: Action, holder: str | None, lease_seconds: float) -> LeaseRecord:
        current = None if self.record is None else self.record.version
        if current != (action.expected_version or None):
            raise LockConflict("the Lease was changed")
        self.versions += 1
        self.record = LeaseRecord(holder, lease_seconds, action.transitions, str(self.versions))
        return self.record

    def delete(self) -> None:
        self.record = None


class StreamFaults:
    """What the operator's Kinesis client meets: listings that fail or are slow."""

    def __init__(self) -> None:
        self.listing_failing_until = -1.0
        self.listing_slow_until = -1.0


class FlakySource:
    """The stream as the operator's Kinesis client sees it."""

    def __init__(self, source: SimSource, faults: StreamFaults, world: World) -> None:
        self._source = source
        self._faults = faults
        self._world = world

    def list_shards(self) -> Any:
        if self._world.now < self._faults.listing_failing_until:
            raise RuntimeError("ListShards: LimitExceededException")
        return self._source.list_shards()

    def backlog(self, shard_id: str, start: Any) -> int | None:
        return self._source.backlog(shard_id, start)

    def incarnation(self) -> None:
        return None  # the simulated stream is never deleted and created again


Respond = Callable[[Reply], None]


class SimConsumer(ManagedConsumer):
    """The registry's record of the consumer, woken on the simulated clock (production
    wakes its asyncio daemon)."""

    def __init__(self, loop: ConsumerLoop, wake: Callable[[], None]) -> None:
        super().__init__(NAMESPACE, NAME, loop)
        self._sim_wake = wake

    def wake(self) -> None:
        self._sim_wake()


def review(token: str) -> Caller:
    """TokenReview, simulated: a worker's token names its pod."""
    account = worker_service_account(NAME)
    return Caller(NAMESPACE, account, pod_name=token, consumer=NAME, consumer_account=account)


class SimReplica:
    """One operator pod. Its process campaigns and, once it leads, claims the leader
    label and runs the consumer's daemon; whenever its term ends the process exits and
    the pod starts it again as a standby. It can crash, or freeze (a process pause: its
    own events wait, what it sent still lands)."""

    def __init__(self, operators: SimOperators, index: int) -> None:
        self.operators = operators
        self.world = operators.world
        self.pod = f"operator-{index}"
        self.offset = self.world.rng.uniform(-1000.0, 1000.0)  # its own monotonic clock
        self.up = False
        self.incarnation = 0
        self.paused_until = -1.0
        self.restarts = 0
        self.driver: ConsumerDriver | None = None

    def clock(self) -> float:
        return self.world.now + self.offset

    # --- the process, with pauses and death ----------------------------------------------

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        incarnation = self.incarnation
        run_in_process(
            self.world,
            delay,
            callback,
            lambda: self._alive(incarnation),
            lambda: self.paused_until,
        )

    def _alive(self, incarnation: int) -> bool:
        return self.up and self.incarnation == incarnation

    def start(self) -> None:
        """A new process in this pod: a standby until elected."""
        self.incarnation += 1
        incarnation = self.incarnation
        self.up = True
        self.driver = None
        self.loop: ConsumerLoop | None = None
        self.lifecycle = Lifecycle()
        self.holder = f"{self.pod}/{incarnation}"  # unique per process, as in production
        self._loads = 0  # and a writer per daemon run within it (consumers.consume)
        self.registry = Registry(self.clock, startup_grace=STARTUP_GRACE)
        self._held: list[tuple[int, Reply, Respond]] = []  # checkpoints waiting for a write
        self._tick_at: float | None = None
        self._plan = 0
        self.elector = ElectionDriver(
            self.operators.lease,
            Election(self.pod, self.operators.timing, self.clock()),
            self._jobs(incarnation, self.operators.lease_latency),
            self.clock,
            self._look,
            timeout=self.operators.timing.retry_seconds + 1.0,
        )
        self._campaign()

    def _jobs(self, incarnation: int, latency: Callable[[str], float]) -> SimJobs:
        return SimJobs(
            self.world,
            latency,
            lambda: self._alive(incarnation),
            lambda outcome: self.schedule(0.0, outcome),
        )

    def crash(self, downtime: float) -> None:
        if self.up:
            self._exit()
            self.world.after(downtime, self.start)

    def freeze(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, self.world.now + seconds)

    def _exit(self) -> None:
        self.up = False
        self.restarts += 1
        if self.driver is not None:
            self.driver.stop()

    # --- elect ----------------------------------------------------------------------------

    def _campaign(self) -> None:
        self.elector.tick()
        self._look()
        if self.up and self.lifecycle.phase is not Phase.ENDED:
            self.schedule(self.elector.until_due() + 1e-3, self._campaign)

    def _look(self) -> None:
        """As __main__: act on what the election says now."""
        was = self.lifecycle.phase
        phase = self.lifecycle.observe(self.elector.leading(), self.elector.lost())
        if phase is Phase.LEADING and was is Phase.STANDBY:
            self.operators.label = self  # LeaderLabel.claim: the Service follows it
            self.registry.leading()
            self.schedule(self.world.rng.uniform(0.05, 0.5), self._load)  # kopf starts
        elif phase is Phase.ENDED and self.up:
            self._exit()  # exit 1: the pod starts it again as a standby
            self.world.after(self.world.rng.uniform(0.5, 2.0), self.start)

    # --- kopf's daemon for the one StreamConsumer -----------------------------------------

    def _load(self) -> None:
        if not self.lifecycle.leading:
            return
        operators = self.operators
        api = GroupedStatusApi(operators.api, operators.api.lease_groups, NAME, operators.layout)
        self._loads += 1
        writer = StatusWriter(api, NAMESPACE, NAME, holder=f"{self.holder}/{self._loads}")
        self.loop = loop = load(
            api.get(),
            writer,
            LoopSettings(shard_sync_seconds=1.0),
            self.clock(),
            lambda: 1,
            wall=lambda: wall(operators.world.now),
        )
        self.coordinator = loop.coordinator
        self.registry.add(SimConsumer(loop, self.wake))
        self.driver = ConsumerDriver(
            NAMESPACE,
            NAME,
            loop,
            lambda _: self.operators.flaky_source,  # type: ignore[arg-type,return-value]
            writer,
            self._jobs(self.incarnation, self.operators.consumer_latency),
            self.clock,
            lambda event: None,
            TIMEOUTS,
            scale=self.operators.scale,
            saved=self._saved,
        )
        self._tick_at = None
        self.wake(0.0)
        if self.operators.deployment is not None:
            self.schedule(2.0, self._check_workers)  # kopf's timer: its initial_delay

    def _check_workers(self) -> None:
        """As reconcile.check_workers, kopf's timer while the daemon runs: a GET of the
        workers' Deployment, its replicas told to the registry with when the GET began."""
        read = self.operators.deployment
        if self.driver is None or read is None:
            return
        read_at = self.clock()

        def land() -> None:
            replicas = deployment_replicas(read())
            self.schedule(
                0.0, lambda: self.registry.deployment_seen(NAMESPACE, NAME, replicas, read_at)
            )

        self.world.after(self.operators.consumer_latency("read"), land)
        self.schedule(DEPLOYMENT_CHECK_SECONDS, self._check_workers)

    def wake(self, delay: float = 0.001) -> None:
        """Tick within `delay` (one pending tick at a time: the soonest)."""
        when = self.world.now + delay
        if self.driver is None or (self._tick_at is not None and self._tick_at <= when):
            return
        self._tick_at = when
        self._plan += 1
        plan = self._plan
        self.schedule(delay, lambda: self._tick(plan))

    def _tick(self, plan: int) -> None:
        """As runner.run_consumer: the daemon returns once the term is over or a newer
        term fenced the status, and is never started again in this process."""
        if plan != self._plan or self.driver is None:
            return
        self._tick_at = None
        self._look()
        if not (self.lifecycle.leading and self.elector.leading()) or self.driver.deposed:
            if self.driver.deposed:
                self.lifecycle.deposed(str(self.driver.loop.deposed))
                self._look()
            self.driver.stop()  # the daemon returned: kopf does not start it again
            self.driver = self.loop = None
            self.registry.remove(NAMESPACE, NAME)
            return
        self.driver.tick()
        self.wake(TICK)

    def _saved(self) -> None:
        assert self.loop is not None
        saved = self.loop.coordinator.persisted_version
        for held in [h for h in self._held if h[0] <= saved]:
            self._held.remove(held)
            held[2](held[1].settled(persisted=True))

    def spec_changed(self, spec: StreamConsumerSpec) -> None:
        if self.loop is not None:
            self.loop.coordinator.update_spec(spec)
            self.wake()

    def reset_requested(self, request: ResetRequest) -> None:
        if self.loop is not None:
            self.loop.coordinator.request_reset(request)
            self.wake()

    # --- the worker API ------------------------------------------------------------------

    def _leading(self) -> bool:
        return self.lifecycle.leading and self.elector.leading()

    def serve(self, path: str, headers: dict[str, str], body: bytes, respond: Respond) -> None:
        """As WorkerApi, through the production `answers`: the same checks, bytes and
        replies; a held checkpoint is answered once saved or when its hold runs out."""
        token = answers.front_door(
            self._leading(), headers.get(WIRE_VERSION_HEADER), headers.get("Authorization")
        )
        if isinstance(token, Reply):
            respond(token)
            return
        caller = review(token)
        consumer = answers.admit(
            caller, NAMESPACE, NAME, self.registry, headers.get(WIRE_VERSION_HEADER)
        )
        if isinstance(consumer, Reply):
            respond(consumer)
            return
        route = ROUTES[path]
        limit = route.body_limit(consumer)
        if len(body) > limit:
            respond(answers.too_large(limit))
            return
        reply = route.receive(consumer, body, caller, self.clock(), self._leading())
        if reply.status == 200 and path == answers.CHECKPOINT.path:
            self.operators.ledger.accepted(reply.body["shardId"], reply.body.get("checkpoint"))
        if (hold := reply.hold) is None:
            respond(reply)
            return
        held = (hold.version, reply, respond)
        self._held.append(held)

        def give_up() -> None:
            if held in self._held:
                self._held.remove(held)
                respond(reply.settled(persisted=False))

        self.schedule(hold.seconds, give_up)


@dataclass(eq=False)
class SimOperators:
    """The operator Deployment: its replicas, their Lease, and the worker API's Service,
    which selects the pod labelled leader. A worker keeps its connection to one replica
    process until that process dies or answers with `Connection: close`."""

    world: World
    api: SimApiServer
    source: InitVar[SimSource]
    ledger: Ledger
    scale: Callable[[int], None]
    # The workers' Deployment as a GET answers; None: not read (without the autoscaler
    # the reading only feeds conditions, and the regression examples keep their schedules).
    deployment: Callable[[], dict[str, Any]] | None
    count: InitVar[int] = 1  # replicas
    newer_peers: bool = False
    layout: Layout = field(default_factory=Layout)  # where the lease table is kept

    def __post_init__(self, source: SimSource, count: int) -> None:
        world = self.world
        self.timing = ElectionTiming(
            lease_seconds=4.0, renew_deadline_seconds=3.0, retry_seconds=1.0
        )
        self.lease = SimLease(world)
        self.faults = StreamFaults()
        self.flaky_source = FlakySource(source, self.faults, world)
        self.replicas = [SimReplica(self, index) for index in range(count)]
        self.label: SimReplica | None = None  # the pod the Service selects
        self._connections: dict[str, tuple[SimReplica, int]] = {}

    def start(self) -> None:
        for replica in self.replicas:
            replica.start()

    @property
    def restarts(self) -> int:
        return sum(replica.restarts for replica in self.replicas)

    def leader(self) -> SimReplica | None:
        leading = [r for r in self.replicas if r.up and r.lifecycle.leading]
        return leading[0] if leading else None

    def completed(self) -> bool:
        """Has the leader found a bounded consumer read to its end?"""
        leader = self.leader()
        return leader is not None and leader.loop is not None and leader.loop.coordinator.completed

    def target(self, arg: int) -> SimReplica:
        """The replica a fault hits: the leader for arg 0, else any."""
        leader = self.leader()
        if arg % 2 == 0 and leader is not None:
            return leader
        return self.replicas[arg % len(self.replicas)]

    # --- latencies ------------------------------------------------------------------------

    def lease_latency(self, kind: str) -> float:
        rng, now = self.world.rng, self.world.now
        if now < self.lease.slow_until:
            return rng.uniform(0.5, 4.0)  # some renewals come back after the deadline
        return rng.uniform(0.002, 0.03)

    def consumer_latency(self, kind: str) -> float:
        rng, now = self.world.rng, self.world.now
        if kind == "listing" and now < self.faults.listing_slow_until:
            return rng.uniform(40.0, 60.0)
        if kind in ("status", "scale"):  # an apiserver under load is slow for both
            slow = now < self.api.slow_until
            return rng.uniform(*(SLOW_WRITE_LATENCY if slow else WRITE_LATENCY))
        return 0.01

    # --- kopf's handlers run on the leader -------------------------------------------------

    def spec_changed(self) -> None:
        spec = StreamConsumerSpec.model_validate(self.api.spec)
        for replica in self.replicas:
            if replica.up:
                replica.spec_changed(spec)

    def reset_requested(self) -> None:
        if (request := ResetRequest.on(self.api.get())) is not None:
            for replica in self.replicas:
                if replica.up:
                    replica.reset_requested(request)

    # --- the Service ----------------------------------------------------------------------

    up = True  # the Service itself: what answers is decided per request

    def _route(self, worker: str) -> SimReplica | None:
        replica, incarnation = self._connections.get(worker, (None, 0))
        if replica is None or not replica._alive(incarnation):
            replica = self.label
            if replica is None or not replica.up:
                return None  # no endpoint: the connection is refused
            self._connections[worker] = (replica, replica.incarnation)
        return replica

    def call(
        self,
        worker: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        answer: Callable[[tuple[int, bytes]], None],
    ) -> None:
        """One request on the worker's connection; `answer` gets the reply's status and
        bytes (with a newer operator's extra field when the run's peers are newer)."""
        replica = self._route(worker)
        if replica is None:
            return

        def respond(reply: Reply) -> None:
            if reply.close:
                self._connections.pop(worker, None)
            if self.newer_peers and reply.status == 200:
                reply = Reply(reply.status, {**reply.body, **FROM_A_NEWER_OPERATOR})
            answer((reply.status, reply.content()))

        replica.schedule(0.0, lambda: replica.serve(path, headers, body, respond))

    def disconnect(self, worker: str) -> None:
        """The worker closed its connection (its request timed out)."""
        self._connections.pop(worker, None)
