"""One StreamConsumer's lease table and worker liveness, and the protocol on top of it:
heartbeats in, assignments and revocations out; checkpoints fenced by epoch. No I/O:
the loop and the HTTP API call into it, the status writer persists what it renders.

Two rules shape it (docs/design.md#durable-before-visible, docs/design.md#self-fencing):
- **Durable before visible.** The table the status last saved is kept beside the live
  one; a grant reaches its worker only once the saved table holds it, so a restart at
  any instant can never hand a shard to a second worker while the first still runs it.
- **Promises are kept.** Each heartbeat answer promises the worker its leases for a
  duration; a worker is expired only after the longest duration it was promised (plus a
  grace), and a longer duration is promised only once the status holds it, so lowering
  `leases.durationSeconds` or restarting never cuts a promise short."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from streamconsumer.controller.leases.bounded import Bound
from streamconsumer.controller.leases.listings import Listings
from streamconsumer.controller.leases.notes import PassedOverNotes
from streamconsumer.controller.leases.resetting import reset_leases
from streamconsumer.controller.leases.start import start_position
from streamconsumer.controller.leases.state import (
    DurableState,
    ShardChanges,
    WorkerProgress,
    expiry_grace,
)
from streamconsumer.controller.leases.stuck import StuckShards
from streamconsumer.controller.leases.views import LeaseViews
from streamconsumer.core.leases import (
    ACTIVE,
    FINISHED,
    HANDOFF,
    RELEASED,
    Action,
    CheckpointRefused,
    EngineSettings,
    ShardLease,
    WorkerLiveness,
    apply_checkpoint,
    collectable,
    finished_shards,
    plan,
)
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import (
    Assignment,
    CheckpointRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    Revocation,
    RevocationReason,
    StartPosition,
)
from streamconsumer.models.api import MAX_HELD_SHARDS, HeldShard
from streamconsumer.models.resource import (
    ResetRecord,
    ResetRequest,
    StreamConsumerSpec,
)

PENDING_GRANT_HEARTBEAT_MS = 250
"""How soon a worker should come back while grants for it are being saved."""


class LeaseCoordinator(LeaseViews):
    """Leases, checkpoints and workers of one consumer. `version` grows with every change
    the status must show; the status writer persists up to a version.

    Shared by the worker API, the consumer loop and the status writer, it is changed only
    through its methods, each the door of one party: the API's `heartbeat` (workers,
    their reports) and `checkpoint` (positions, releases); the loop's `step` (the lease
    engine's grants, hand-offs, expiries), `set_shards` (a listing), `set_backlog` (the
    probes), `passed_over.take`, `scaled_to` (the autoscaler) and `status_changed` (a
    condition of its own); the writer's `persisted` and `adopt`; the kopf handlers'
    `update_spec` and `request_reset`. Everything else only reads it."""

    def __init__(
        self,
        spec: StreamConsumerSpec,
        durable: DurableState,
        now: float,
        *,
        created: datetime,
        desired_replicas: int | None = None,
        completed: bool = False,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        object_created: datetime | None = None,
    ) -> None:
        self.spec = spec
        # An end atCreation is this object's, where `created` may be a kept table's.
        end = spec.end.instant(object_created or created) if spec.end else None
        self.bound = Bound(end, wall, completed)
        self.created = created  # the resource's creationTimestamp: where LATEST starts
        self.durable = durable
        self.leases: dict[str, ShardLease] = dict(durable.leases)
        self.finished: set[str] = set(durable.finished)
        self.shards: list[Shard] = []
        self.by_id: dict[str, Shard] = {}
        self.shards_known = False
        self.listings = Listings()
        # Releases taken but not saved yet: (shard, worker, epoch) -> (the lease as
        # released, the version holding it). The worker repeats its release until it is
        # saved, while the shard may already be planned onward (and released again by its
        # next owner); the repeat is answered from here, never as a loss
        # (docs/design.md#hand-off-on-planned-moves).
        self._unsaved_releases: dict[tuple[str, str, int], tuple[ShardLease, int]] = {}
        self.workers: dict[str, WorkerProgress] = {}
        self.backlog: dict[str, int] = {}  # measured lag of shards nobody live owns
        self.passed_over = PassedOverNotes()  # reported, not yet told as Events
        self.last_reset = durable.last_reset
        # The stream the table is of (`StreamSource.incarnation`), and another one seen
        # under its name since: the table is then never applied to it; every worker hands
        # off as if paused until the object is created anew (docs/checkpoints.md).
        # Saved too: a restart or a new leader must not serve the table again.
        self.stream = durable.stream
        self.stream_replaced = durable.stream_replaced
        self._reset_waiting: ResetRequest | None = None  # until the first listing
        self._reset_asked: ResetRequest | None = None  # the last one asked, saved or not
        self.version = 0
        self.persisted_version = 0
        self.watch = StuckShards()  # docs/failure-policy.md#stuck-shards
        self.desired_replicas = desired_replicas  # the lag autoscaler's last word
        # After a (re)start nobody has been heard yet: every owner in the status keeps its
        # leases for the longest lease any worker may have been promised
        # (docs/design.md#crash-safe-operator).
        self._promises: dict[float, float] = {}  # duration -> until
        self.grant_restart_wait(now)

    def grant_restart_wait(self, now: float) -> None:
        """Nobody has been heard since `now`: every owner in the table keeps its leases
        for the longest lease it may have been promised, plus the grace, from `now` on.
        Called at load and again when the term's fence lands: until then no worker
        could renew (docs/design.md#term-fence)."""
        promised = self.durable.promised_lease_seconds or self.lease_duration
        restart_wait = now + promised + expiry_grace(promised)
        self._promises[promised] = max(self._promises.get(promised, now), restart_wait)
        for lease in self.leases.values():
            if lease.owner:
                progress = self.workers.setdefault(lease.owner, WorkerProgress(restart_wait))
                progress.expires_at = max(progress.expires_at, restart_wait)

    # --- settings ------------------------------------------------------------------

    @property
    def lease_duration(self) -> float:
        return self.spec.leases.duration_seconds

    def update_spec(self, spec: StreamConsumerSpec) -> None:
        self.spec = spec
        self._changed()

    def _promise(self) -> float:
        """The lease duration to promise now: the spec's, but never longer than what the
        status holds (a longer promise is made only once it is saved)."""
        saved = self.durable.promised_lease_seconds
        return self.lease_duration if saved is None else min(self.lease_duration, saved)

    def promised_lease_seconds(self, now: float) -> float:
        """The status' value: the spec's duration, or a longer one still in force."""
        self._promises = {d: until for d, until in self._promises.items() if until > now}
        return max([self.lease_duration, *self._promises])

    def _changed(self) -> None:
        self.version += 1

    def status_changed(self) -> None:
        """Something else the status shows changed (a condition): write it again."""
        self._changed()

    def scaled_to(self, replicas: int) -> None:
        """The lag autoscaler set the worker count (the status shows it)."""
        self.desired_replicas = replicas
        self._changed()

    # --- the engine ----------------------------------------------------------------

    def listed_stream(self, incarnation: str) -> bool:
        """The stream listed is `incarnation`: may its listing be applied to this table?
        The first one told is recorded (saved with the table); another one never is."""
        if self.stream is None:
            self.stream = incarnation
            self._changed()
        elif incarnation != self.stream and incarnation != self.stream_replaced:
            self.stream_replaced = incarnation
            self._changed()
        return incarnation == self.stream

    def set_shards(self, shards: Sequence[Shard], listing: int | None = None) -> ShardChanges:
        """Takes a complete listing of the stream: the one numbered `listing` by
        `listings.start` (None: one started just now)."""
        self.listings.current = self.listings.start() if listing is None else listing
        shards = list(shards)
        known = {shard.id for shard in self.shards}
        listed = {shard.id for shard in shards}
        new = sorted(listed - known) if self.shards_known else []
        gone = sorted(sid for sid in self.leases if sid not in listed)
        expired = [sid for sid in gone if self.leases[sid].state is not FINISHED]
        for shard_id in gone:
            del self.leases[shard_id]
        changed = shards != self.shards or bool(gone) or not self.finished <= listed
        self.finished &= listed  # lineage needs only what the stream can still list
        self.shards = shards
        self.by_id = {shard.id: shard for shard in shards}
        self.shards_known = True
        if changed:
            self._changed()
        if self._reset_waiting is not None:
            self.request_reset(self._reset_waiting)
        return ShardChanges(new=new, expired_unfinished=expired)

    def step(self, now: float) -> list[Action]:
        """Runs the lease engine once; collects finished leases and forgotten workers.

        Before the first listing (Kinesis slow or down after a restart) it serves the
        shards already started: their parents were finished when they were first
        granted, so silent workers still expire and draining ones still hand off."""
        shards = self.shards if self.shards_known else self.started_shards()
        # Paused: every worker is treated as leaving, so each hands its shards off at
        # their positions (a planned move to nobody) and none is granted. Complete too.
        paused = self.spec.paused or self.stream_replaced is not None or self.completed
        liveness = [
            WorkerLiveness(name, progress.expires_at, progress.draining or paused)
            for name, progress in self.workers.items()
        ]
        # No worker holds more than a heartbeat may list.
        wanted = self.spec.leases.max_per_worker or MAX_HELD_SHARDS
        settings = EngineSettings(max_per_worker=min(wanted, MAX_HELD_SHARDS))
        if self.watch.judge(self.leases, self.workers, now, self.spec.leases.stuck_shard_seconds):
            self._changed()  # the condition names them
        withdrawn = self.watch.withdrawn
        result = plan(shards, self.leases, liveness, now, settings, self.finished, withdrawn)
        self.leases = result.leases
        self.watch.prune(self.leases)
        if self.shards_known:  # collecting needs the stream's view of lineage
            listed = set(self.by_id)
            done = finished_shards(self.shards, self.leases, self.finished) & listed
            for shard_id in collectable(self.shards, self.leases):
                del self.leases[shard_id]
                self._changed()
            if not done <= self.finished:
                self.finished |= done
                self._changed()
            if self.bound.reached(listed, done, self.listings):
                self._changed()
        owners = {lease.owner for lease in self.leases.values()}
        for name, progress in list(self.workers.items()):
            if now > progress.expires_at and name not in owners:
                del self.workers[name]
                self._changed()
        if result.actions:
            self._changed()
        return result.actions

    def watch_probes(
        self, now: float, quiet_for: float, limit: int
    ) -> list[tuple[str, StartPosition]]:
        """Quiet owned shards to probe for records waiting (`StuckShards.probes`); none
        with the watchdog off."""
        if not self.spec.leases.stuck_shard_seconds:
            return []
        return self.watch.probes(self.leases, now, quiet_for, limit, self.start_of)

    # --- the protocol --------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, now: float) -> HeartbeatResponse:
        """Renews the worker and answers it. What the request claims is judged before
        anything changes; what it reports (lag, failures, passed-over records) counts only
        for the shards it owns under the epochs it claims."""
        name = request.worker
        held = {h.shard_id: h for h in request.held}
        revocations = []
        owned: list[HeldShard] = []
        for shard_id, claim in held.items():
            lease = self.leases.get(shard_id)
            if self._unsaved_release(shard_id, name, claim.epoch) is not None:
                continue  # letting go: its release is not saved yet, nor lost
            if (
                lease is None
                or lease.owner != name
                or lease.epoch != claim.epoch
                or self.watch.holds(self.leases, shard_id, name, claim.epoch)  # stuck: fenced out
            ):
                revocations.append(
                    Revocation(shard_id=shard_id, epoch=claim.epoch, reason=RevocationReason.LOST)
                )
            else:
                owned.append(claim)
        progress = self.workers.get(name)
        if progress is None:
            progress = self.workers[name] = WorkerProgress(expires_at=now)
            self._changed()
        if request.draining and not progress.draining:  # a worker never un-drains
            progress.draining = True
            self._changed()
        promise = self._promise()
        progress.expires_at = max(progress.expires_at, now + promise + expiry_grace(promise))
        self._promises[promise] = max(self._promises.get(promise, now), progress.expires_at)
        if progress.report(owned):
            self._changed()  # Degraded names the blocked shards
        self.passed_over.add(name, owned)
        assignments = []
        pending = False
        for lease in list(self.leases.values()):
            if lease.owner != name or self.watch.holds(
                self.leases, lease.shard_id, name, lease.epoch
            ):
                continue
            owned_claim = held.get(lease.shard_id)
            if lease.state is HANDOFF and owned_claim is None and self._never_sent(lease):
                self.leases[lease.shard_id] = replace(
                    lease, owner=None, state=RELEASED, handoff_to=None
                )
                self._changed()
            elif lease.state is HANDOFF and (
                owned_claim is None or owned_claim.epoch == lease.epoch
            ):
                revocations.append(
                    Revocation(
                        shard_id=lease.shard_id,
                        epoch=lease.epoch,
                        reason=RevocationReason.HANDOFF,
                    )
                )
            elif lease.state is ACTIVE and (
                owned_claim is None or owned_claim.epoch != lease.epoch
            ):
                if self.stream_replaced is not None:
                    continue  # stopped: the next step hands it off, nobody starts it
                if self._saved(lease):
                    assignments.append(self._assignment(lease))
                else:
                    pending = True
        if progress.draining and not held and name not in self.owners():
            del self.workers[name]  # it has let go of everything and is leaving
            self._changed()
        return HeartbeatResponse(
            lease_duration_ms=int(promise * 1000),
            assignments=assignments,
            revocations=revocations,
            next_heartbeat_ms=PENDING_GRANT_HEARTBEAT_MS if pending else None,
        )

    def _never_sent(self, lease: ShardLease) -> bool:
        """A grant not saved yet was never sent (docs/design.md#durable-before-visible):
        handed off before it was, nobody runs it, and it is released at once. Revoked
        instead, its epoch would reach a worker that no table may keep (a new leader reads
        the saved one, lower), and the worker, having let go of the higher epoch, would
        ignore every grant of the lower one: its shard never read again."""
        return not self._saved(lease)

    def _saved(self, lease: ShardLease) -> bool:
        """Is this grant in the status already (docs/design.md#durable-before-visible)?"""
        saved = self.durable.leases.get(lease.shard_id)
        return saved is not None and saved.owner == lease.owner and saved.epoch == lease.epoch

    def _assignment(self, lease: ShardLease) -> Assignment:
        shard = self.by_id.get(lease.shard_id)
        parents = list(shard.parents) if shard else []
        return Assignment(
            shard_id=lease.shard_id,
            epoch=lease.epoch,
            start=start_position(self.spec, self.created, lease, parents),
            parents=parents,
            end=self.end,
        )

    def checkpoint(self, request: CheckpointRequest) -> ShardLease:
        """Applies a checkpoint or release; raises CheckpointRefused (fenced or invalid),
        or CheckpointDeferred (a SHARD_END before the first listing: asked again later)."""
        lease = self.leases.get(request.shard_id)
        released = self._unsaved_release(request.shard_id, request.worker, request.epoch)
        repeated = (
            released is not None
            and request.release
            and request.sequence_number in (None, released.checkpoint)
        )
        if repeated:
            assert released is not None
            return released  # whatever came since (a grant onward, a reset) is not saved
        if (
            lease is None
            and request.sequence_number == SHARD_END
            and request.shard_id in self.finished
        ):
            # Finished, and its lease already collected: a repeated SHARD_END is a no-op.
            return ShardLease(request.shard_id, None, request.epoch, SHARD_END, FINISHED)
        if self.watch.holds(self.leases, request.shard_id, request.worker, request.epoch):
            raise CheckpointRefused(
                f"{request.worker} no longer holds {request.shard_id} at epoch "
                f"{request.epoch}: the shard was stuck and its lease withdrawn",
                lease_lost=True,
            )
        closed = self._closed(request)
        updated = apply_checkpoint(
            lease,
            request.worker,
            request.epoch,
            request.sequence_number,
            request.release,
            shard_closed=closed,
        )
        if updated != lease:
            self.leases[request.shard_id] = updated
            self._changed()
            if request.release and updated.state is RELEASED:
                key = (request.shard_id, request.worker, request.epoch)
                self._unsaved_releases[key] = (updated, self.version)
        return updated

    def _unsaved_release(self, shard_id: str, worker: str, epoch: int) -> ShardLease | None:
        """The lease as `worker` released it under `epoch`, if that is not saved yet."""
        entry = self._unsaved_releases.get((shard_id, worker, epoch))
        return None if entry is None else entry[0]

    def _closed(self, request: CheckpointRequest) -> bool | None:
        """What the listing says of a shard a SHARD_END names; None: not known yet. A
        bounded consumer's shard ends where the consumer does, open or not, once that
        time has come (a reader that ends a shard sooner is taken as any other)."""
        if request.sequence_number != SHARD_END:
            return None if not self.shards_known else False
        if self.bound.takes_open_shards_end(self.listings):
            return True
        if not self.shards_known:
            return None
        return self.listings.closed(request.shard_id, self.by_id.get(request.shard_id))

    # --- resets --------------------------------------------------------------------

    def request_reset(self, request: ResetRequest) -> None:
        """Marks the shards for a reset (once per request id). An owned shard is handed
        off first (the engine does it); the saved status holds the request before any
        grant from the new position leaves the operator (durable before visible)."""
        if self.last_reset is not None and self.last_reset.id == request.id:
            return
        self._reset_asked = request
        if not self.shards_known:
            self._reset_waiting = request  # which shards exist is not known yet
            return
        self._reset_waiting = None
        listed = {shard.id for shard in self.shards}
        reset = reset_leases(self.leases, listed, self.finished, request)
        self.last_reset = ResetRecord(
            id=request.id, to=request.to, shards=reset, requested_by=request.requested_by
        )
        self._changed()

    # --- the status ----------------------------------------------------------------

    def snapshot(self, now: float) -> DurableState:
        """The durable part of the status, as of now (frozen leases: a cheap copy)."""
        return DurableState(
            leases=dict(self.leases),
            finished=frozenset(self.finished),
            promised_lease_seconds=self.promised_lease_seconds(now),
            last_reset=self.last_reset,
            stream=self.stream,
            stream_replaced=self.stream_replaced,
        )

    def persisted(self, snapshot: DurableState, version: int) -> None:
        """The status now holds `snapshot` (taken at `version`)."""
        self.durable = snapshot
        self.persisted_version = max(self.persisted_version, version)
        for key, (_, held_at) in list(self._unsaved_releases.items()):
            if held_at <= self.persisted_version:
                del self._unsaved_releases[key]

    def adopt(self, durable: DurableState, now: float) -> None:
        """Another writer saved a newer table: start over from it. Nothing of ours that
        was not saved ever left this process, so dropping it is safe."""
        fresh = LeaseCoordinator(self.spec, durable, now, created=self.created)
        self.durable, self.leases, self.finished = durable, fresh.leases, fresh.finished
        self.last_reset = durable.last_reset
        self.stream = durable.stream or self.stream  # another writer's table, same object
        self.stream_replaced = durable.stream_replaced or self.stream_replaced
        self.workers, self._promises = fresh.workers, fresh._promises
        self.backlog = {}
        self._reset_waiting = None
        self.watch.forget()
        self._unsaved_releases = {}  # the adopted table decides; a repeat is judged by it
        if self.shards_known:
            self.set_shards(self.shards, self.listings.current)  # drops leases of shards gone since
        asked = self._reset_asked
        if asked is not None and (self.last_reset is None or self.last_reset.id != asked.id):
            self.request_reset(asked)  # asked for, not saved yet: the adopted table lacks it
        self._changed()

    # --- views (more in `LeaseViews`) -------------------------------------------------

    def set_backlog(self, measured: Mapping[str, int | None], now: float) -> None:
        """Lag measured by the operator itself for shards without a live owner (a
        consumer scaled to zero, or shards left over by maxPerWorker)."""
        unowned = set(self.unowned(now))
        self.backlog = {
            sid: millis for sid, millis in measured.items() if millis and sid in unowned
        }
