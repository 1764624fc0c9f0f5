"""One StreamConsumer's lease table and worker liveness, and the protocol on top of it:
heartbeats in, assignments and revocations out; checkpoints fenced by epoch. No I/O:
the loop and the HTTP API call into it, the status writer reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from streamconsumer.core.leases import (
    ACTIVE,
    HANDOFF,
    Action,
    CheckpointRefused,
    EngineSettings,
    ShardLease,
    WorkerLiveness,
    apply_checkpoint,
    collectable,
    plan,
    ready_shards,
    release,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    Lease,
    Revocation,
    RevocationReason,
    StartPosition,
    StartPositionType,
)
from streamconsumer.models.resource import InitialPosition, StreamConsumerSpec


@dataclass
class WorkerProgress:
    last_heard: float
    draining: bool = False
    millis_behind: dict[str, int] = field(default_factory=dict)


class Coordinator:
    """Leases, checkpoints and workers of one consumer. `version` grows with every change
    the status must show; the status writer persists up to a version."""

    def __init__(
        self, spec: StreamConsumerSpec, leases: Mapping[str, ShardLease], now: float
    ) -> None:
        self.spec = spec
        self.leases: dict[str, ShardLease] = dict(leases)
        self.shards: list[Shard] = []
        self._by_id: dict[str, Shard] = {}
        self.shards_known = False
        self.workers: dict[str, WorkerProgress] = {}
        # After a (re)start nobody has been heard yet: every owner in the status gets a
        # full lease duration to show up before it is expired (DESIGN §3.8).
        for lease in self.leases.values():
            if lease.owner:
                self.workers.setdefault(lease.owner, WorkerProgress(last_heard=now))
        self.version = 0
        self.persisted_version = 0
        self.desired_replicas: int | None = None  # set by the lag autoscaler

    # --- settings ------------------------------------------------------------------

    @property
    def lease_duration(self) -> float:
        return self.spec.leases.duration_seconds

    @property
    def settings(self) -> EngineSettings:
        # The grace covers one heartbeat in flight, so the worker's own fence (measured
        # from when it *sent* its last successful heartbeat) always fires first.
        return EngineSettings(
            lease_duration=self.lease_duration,
            expiry_grace=self.lease_duration / 3,
            max_per_worker=self.spec.leases.max_per_worker,
        )

    def _changed(self) -> None:
        self.version += 1

    # --- the engine ----------------------------------------------------------------

    def set_shards(self, shards: Sequence[Shard]) -> bool:
        shards = list(shards)
        changed = shards != self.shards
        self.shards = shards
        self._by_id = {shard.id: shard for shard in shards}
        self.shards_known = True
        if changed:
            self._changed()
        return changed

    def step(self, now: float) -> list[Action]:
        """Runs the lease engine once; collects finished leases and forgotten workers."""
        if not self.shards_known:
            return []
        liveness = [
            WorkerLiveness(name, progress.last_heard, progress.draining)
            for name, progress in self.workers.items()
        ]
        result = plan(self.shards, self.leases, liveness, now, self.settings)
        self.leases = result.leases
        for shard_id in collectable(self.shards, self.leases):
            del self.leases[shard_id]
            self._changed()
        owners = {lease.owner for lease in self.leases.values()}
        expiry = self.settings.expiry_after
        for name, progress in list(self.workers.items()):
            if now - progress.last_heard > expiry and name not in owners:
                del self.workers[name]
                self._changed()
        if result.actions:
            self._changed()
        return result.actions

    # --- the protocol --------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, now: float) -> HeartbeatResponse:
        progress = self.workers.get(request.worker)
        if progress is None:
            progress = self.workers[request.worker] = WorkerProgress(last_heard=now)
            self._changed()
        if progress.draining != request.draining:
            progress.draining = request.draining
            self._changed()
        progress.last_heard = now
        held = {h.shard_id: h for h in request.held}
        revocations = []
        for shard_id, claim in held.items():
            lease = self.leases.get(shard_id)
            if lease is None or lease.owner != request.worker or lease.epoch != claim.epoch:
                revocations.append(Revocation(shard_id=shard_id, reason=RevocationReason.LOST))
            elif lease.state is HANDOFF:
                revocations.append(Revocation(shard_id=shard_id, reason=RevocationReason.HANDOFF))
            if claim.millis_behind_latest is not None:
                progress.millis_behind[shard_id] = claim.millis_behind_latest
        for shard_id in list(progress.millis_behind):
            if shard_id not in held:
                del progress.millis_behind[shard_id]
        for shard_id, lease in list(self.leases.items()):
            # Asked to hand off a shard it never started (the revocation came before the
            # worker picked up the grant): nothing to finish, so release it right away.
            # Safe because a worker reports every shard it runs in each heartbeat.
            if lease.owner == request.worker and lease.state is HANDOFF and shard_id not in held:
                self.leases[shard_id] = release(lease, request.worker, lease.epoch)
                self._changed()
        assignments = [
            self._assignment(lease)
            for lease in self.leases.values()
            if lease.owner == request.worker
            and lease.state is ACTIVE
            and (lease.shard_id not in held or held[lease.shard_id].epoch != lease.epoch)
        ]
        return HeartbeatResponse(
            lease_duration_ms=int(self.lease_duration * 1000),
            assignments=assignments,
            revocations=revocations,
        )

    def _assignment(self, lease: ShardLease) -> Assignment:
        shard = self._by_id.get(lease.shard_id)
        parents = list(shard.parents) if shard else []
        return Assignment(
            shard_id=lease.shard_id,
            epoch=lease.epoch,
            start=self._start_position(lease, parents),
            parents=parents,
        )

    def _start_position(self, lease: ShardLease, parents: list[str]) -> StartPosition:
        if lease.checkpoint is not None:
            return StartPosition(
                type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=lease.checkpoint
            )
        if parents:
            # A child of a reshard: its parents were read to the end, so start at its
            # beginning whatever the initial position (as KCL does).
            return StartPosition(type=StartPositionType.TRIM_HORIZON)
        initial = self.spec.initial_position
        if initial is InitialPosition.AT_TIMESTAMP:
            return StartPosition(
                type=StartPositionType.AT_TIMESTAMP, timestamp=self.spec.initial_timestamp
            )
        return StartPosition(type=StartPositionType(initial.value))

    def checkpoint(self, request: CheckpointRequest) -> ShardLease:
        """Applies a checkpoint; raises CheckpointRefused (fenced or invalid)."""
        lease = self.leases.get(request.shard_id)
        if request.sequence_number is None:
            if lease is None:
                raise CheckpointRefused("unknown shard", lease_lost=False)
            updated = release(lease, request.worker, request.epoch)
        else:
            updated = apply_checkpoint(
                lease, request.worker, request.epoch, request.sequence_number, request.release
            )
        if updated != lease:
            self.leases[request.shard_id] = updated
            self._changed()
        return updated

    # --- views ---------------------------------------------------------------------

    def assignable(self) -> list[str]:
        """Shards a worker may hold now (not finished, parents done)."""
        return ready_shards(self.shards, self.leases)

    def lag_millis(self) -> dict[str, int]:
        lag: dict[str, int] = {}
        for name, progress in self.workers.items():
            for shard_id, millis in progress.millis_behind.items():
                lease = self.leases.get(shard_id)
                if lease is not None and lease.owner == name:
                    lag[shard_id] = millis
        return lag

    def status_leases(self) -> dict[str, Lease]:
        lag = self.lag_millis()
        parents = {s.id: list(s.parents) for s in self.shards}
        return {
            shard_id: Lease(
                owner=lease.owner,
                epoch=lease.epoch,
                checkpoint=lease.checkpoint,
                parents=parents.get(shard_id, []),
                state=lease.state,
                handoff_to=lease.handoff_to,
                millis_behind_latest=lag.get(shard_id),
            )
            for shard_id, lease in sorted(self.leases.items())
        }


def leases_from_status(status: Mapping[str, object] | None) -> dict[str, ShardLease]:
    """The lease table as the status last persisted it (the operator's durable state)."""
    raw = (status or {}).get("leases") or {}
    assert isinstance(raw, dict)
    leases = {}
    for shard_id, body in raw.items():
        lease = Lease.model_validate(body)
        leases[shard_id] = ShardLease(
            shard_id=shard_id,
            owner=lease.owner,
            epoch=lease.epoch,
            checkpoint=lease.checkpoint,
            state=lease.state,
            handoff_to=lease.handoff_to,
        )
    return leases
