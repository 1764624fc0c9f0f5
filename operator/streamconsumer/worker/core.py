"""The worker's side of the protocol, sans-I/O: which shards it runs (a ShardMachine
each), what its heartbeat says, and what an answer changes. `runtime.py` drives it with
threads and HTTP; the simulator drives it with simulated time and network.

Applying an answer keeps this order, all at once: revocations first, then fence
renewals (never for a shard just lost), then assignments (docs/design.md#single-owner). A worker
also remembers, per shard, the epoch it last let go of and its last word: it never
starts a shard again under that epoch, and if the operator still counts the shard as
its own (a restart lost the release), it says that last word again.

Processor calls are watched (`watch`), since a thread cannot be interrupted. A call
still running when its shard's fence closes ends the process at once: the operator may
grant the shard elsewhere a grace period later, and only the process's end stops the call
(docs/design.md#self-fencing). A call past the policy's timeout is hung: reported, the
other shards are handed off, then the process ends and the shard restarts from its
checkpoint."""

from __future__ import annotations

import random
from collections.abc import Callable

from streamconsumer.core.backoff import Backoff
from streamconsumer.models import (
    CheckpointRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    HeldShard,
    RevocationReason,
)
from streamconsumer.models.api import checkpoint_hold_seconds
from streamconsumer.models.failure import FailurePolicy
from streamconsumer.models.resource import DEFAULT_MAX_RECORDS, MAX_READS_PER_SECOND
from streamconsumer.processor import Record
from streamconsumer.worker.batching import BatchingWindow
from streamconsumer.worker.shard import CALL_NAMES, LoseLease, ShardMachine, Stop

FAILED_HEARTBEAT_RETRY_SECONDS = 1.0
MAX_REQUEST_SECONDS = 5.0
MIN_REQUEST_SECONDS = 0.5


class WorkerCore:
    def __init__(
        self,
        name: str,
        prefetch: int,
        wants_empty_batches: bool = False,
        give_up_seconds: float = 30.0,
        rng: random.Random | None = None,
        policy: FailurePolicy | None = None,
        drain_seconds: float = 25.0,
        max_reads_per_second: float = MAX_READS_PER_SECOND,
        keep: Callable[[Record], bool] | None = None,
        parallelism: int = 1,
        batch_size: int | None = None,
        batching_window_seconds: float = 0.0,
        max_records: int = DEFAULT_MAX_RECORDS,
    ) -> None:
        self.name = name
        # A batching processor (empty batches: its flush clock) buffers across calls and
        # checkpoints what it committed: it cannot take calls at once, nor a checkpoint
        # the worker moves itself (docs/design.md#per-key-parallelism).
        self.parallelism = 1 if wants_empty_batches else parallelism
        self.batch_size = None if wants_empty_batches else batch_size
        self.batching_window_seconds = batching_window_seconds
        # A gathered call is full at what one read brings, or at what the calls of one
        # Deliver take at once (calls.py): batchSize for each of `parallelism` of them.
        self._fill_to = self.batch_size * self.parallelism if self.batch_size else max_records
        self.machines: dict[str, ShardMachine] = {}
        self.interval = 0.0  # seconds until the next heartbeat is due
        self.exit_reason: str | None = None  # refused for too long: end, handing nothing off
        self.overran: str | None = None  # a call outlived its fence: end at once
        self.hung: str | None = None  # a call is hung: hand the other shards off, then end
        self.draining = False
        self._prefetch = prefetch
        self._wants_empty = wants_empty_batches
        self._give_up = give_up_seconds
        self._rng = rng or random.Random()
        self._policy = policy or FailurePolicy()
        self._drain_seconds = drain_seconds
        self._read_interval = 1.0 / max_reads_per_second
        self._keep = keep  # processor.filter
        self._let_go: dict[str, tuple[int, CheckpointRequest]] = {}
        self._sent: dict[str, HeldShard] = {}  # what the heartbeat in flight listed
        self._refused_since: float | None = None
        self._drain_until: float | None = None
        self._owns_nothing = False  # the last answer assigned and revoked nothing
        self._lease: float | None = None  # as the operator last said

    @property
    def request_timeout(self) -> float:
        """How long to wait for an answer. A third of the lease at most: after an operator
        restart, this worker's heartbeat must reach it well within lease + grace, even if
        the heartbeat in flight went to the dead process (docs/design.md#crash-safe-operator)."""
        if self._lease is None:
            return MAX_REQUEST_SECONDS
        return max(MIN_REQUEST_SECONDS, min(MAX_REQUEST_SECONDS, self._lease / 3))

    @property
    def waiting_timeout(self) -> float:
        """How long to wait for the answer to a `wait: true` checkpoint (a release or
        SHARD_END): the operator's hold plus the request timeout. Within the lease, so
        one sent to a replica that froze or died is sent again to the new leader before
        the shard's fence runs out (docs/design.md#crash-safe-operator)."""
        lease = MAX_REQUEST_SECONDS * 3 if self._lease is None else self._lease
        return self.request_timeout + checkpoint_hold_seconds(lease)

    # --- heartbeats ----------------------------------------------------------------------

    def heartbeat(self, now: float) -> HeartbeatRequest:
        self._sent = {shard_id: m.held(now) for shard_id, m in self.machines.items()}
        return HeartbeatRequest(
            worker=self.name, held=list(self._sent.values()), draining=self.draining
        )

    def answered(
        self, response: HeartbeatResponse, sent_at: float, now: float
    ) -> tuple[list[ShardMachine], list[CheckpointRequest]]:
        """Applies an answer; returns the machines to start and the requests to send
        (repeated last words and releases of shards this worker will not run)."""
        self._refused_since = None
        lease = self._lease = response.lease_duration_ms / 1000
        resend: list[CheckpointRequest] = []
        lost: set[str] = set()
        for revocation in response.revocations:
            machine = self.machines.get(revocation.shard_id)
            if machine is not None and machine.epoch == revocation.epoch:
                machine.revoke(Stop(revocation.reason.value))
                if revocation.reason is RevocationReason.LOST:
                    lost.add(revocation.shard_id)
            elif revocation.reason is RevocationReason.HANDOFF:
                resend.append(self._let_go_of(revocation.shard_id, revocation.epoch))
        for shard_id, held in self._sent.items():
            machine = self.machines.get(shard_id)
            if machine is not None and machine.epoch == held.epoch:
                machine.reported(held)
                if shard_id not in lost:
                    machine.renew(sent_at + lease)
        started = []
        for assignment in response.assignments:
            shard_id, epoch = assignment.shard_id, assignment.epoch
            current = self.machines.get(shard_id)
            if current is not None:
                if current.epoch < epoch:
                    current.revoke(Stop.LOST)  # an older grant of ours: fenced out
                continue
            previous = self._let_go.get(shard_id)
            if previous is not None and previous[0] >= epoch:
                if previous[0] == epoch:
                    resend.append(previous[1])
                continue
            if self.draining:
                resend.append(self._let_go_of(shard_id, epoch))
                continue
            machine = ShardMachine(
                self.name,
                assignment,
                fence_deadline=sent_at + lease,
                prefetch=self._prefetch,
                read_interval=self._read_interval,
                wants_empty_batches=self._wants_empty,
                retry=Backoff(
                    base=self._policy.initial_backoff_seconds,
                    cap=self._policy.max_backoff_seconds,
                    rng=self._rng,
                ),
                policy=self._policy,
                keep=self._keep,
                parallelism=self.parallelism,
                batch_size=self.batch_size,
                window=BatchingWindow(self.batching_window_seconds, self._fill_to),
            )
            self.machines[shard_id] = machine
            started.append(machine)
        self._owns_nothing = not response.assignments and not response.revocations
        self.interval = lease / 3
        if response.next_heartbeat_ms is not None:
            self.interval = min(self.interval, response.next_heartbeat_ms / 1000)
        return started, [r.model_copy(update={"wait": False}) for r in resend]

    def failed(self, refused: str | None, now: float) -> None:
        """No answer (`refused` None), or a refusal (401/403/404) with its message. A
        worker refused for long (its pod was deleted, its consumer is gone) gives up."""
        self.interval = min(FAILED_HEARTBEAT_RETRY_SECONDS, self.request_timeout)
        if refused is None:
            return
        if self._refused_since is None:
            self._refused_since = now
        if now - self._refused_since >= self._give_up:
            self.exit_reason = (
                f"the operator refused this worker for {self._give_up:.0f}s: {refused}"
            )

    def _let_go_of(self, shard_id: str, epoch: int) -> CheckpointRequest:
        """The request that lets go of a shard this worker does not run under `epoch`."""
        previous = self._let_go.get(shard_id)
        if previous is not None and previous[0] == epoch:
            return previous[1]
        request = CheckpointRequest(worker=self.name, shard_id=shard_id, epoch=epoch, release=True)
        if previous is None or previous[0] < epoch:
            self._let_go[shard_id] = (epoch, request)
        return request

    # --- shards and shutdown ---------------------------------------------------------------

    def finished(self, machine: ShardMachine) -> None:
        if self.machines.get(machine.shard_id) is machine:
            del self.machines[machine.shard_id]
        self._let_go[machine.shard_id] = (machine.epoch, machine.last_request())

    def drain(self, now: float) -> None:
        """SIGTERM: take nothing new, hand everything off within `drain_seconds` (the pod's
        grace period, less a margin)."""
        if not self.draining:
            self.draining = True
            self._drain_until = now + self._drain_seconds
            self.interval = 0.0

    def watch(self, now: float) -> float | None:
        """Checks the calls in flight; returns when to look again (None: no call in flight).
        Sets `overran` if a call outlived its shard's fence, `hung` (and drains) if a call
        ran past the timeout. lease_lost() is a notice, made after the fence: only
        its timeout is watched."""
        soonest: float | None = None
        for machine in self.machines.values():
            started, call = machine.call_started, machine.call
            if started is None or call is None:
                continue
            name = CALL_NAMES[type(call)]
            check = float("inf")
            if not isinstance(call, LoseLease):
                if now >= machine.fence_deadline and not machine.between_parts:
                    self.overran = (
                        f"{machine.shard_id}: {name} was still running when the shard's "
                        "lease ran out (no heartbeat was answered in time); exiting at once, "
                        "so that no other worker processes the shard at the same time"
                    )
                    return None
                # (Past it between calls: none begins, and none runs to outlive it.)
                check = machine.fence_deadline if now < machine.fence_deadline else check
            if machine.hung(now):
                if self.hung is None:
                    self.hung = (
                        f"{machine.shard_id}: {machine.hung_call(now)}; the other shards are "
                        "handed off, then the worker exits and the shard restarts from its "
                        "checkpoint"
                    )
                    self.drain(now)
            else:
                check = min(check, started + self._policy.timeout_seconds)
            if check != float("inf"):  # (a hung lease_lost(): nothing more to look for)
                soonest = check if soonest is None else min(soonest, check)
        return soonest

    def done(self, now: float) -> bool:
        """May the process exit? After a drain once the operator counts nothing as ours
        (or the drain's time is up; with a call hung, once the other shards are let go),
        or when giving up."""
        if self.exit_reason is not None or self.overran is not None:
            return True
        if not self.draining:
            return False
        assert self._drain_until is not None
        if self.hung is not None and all(m.hung(now) for m in self.machines.values()):
            return True
        return (not self.machines and self._owns_nothing) or now >= self._drain_until
