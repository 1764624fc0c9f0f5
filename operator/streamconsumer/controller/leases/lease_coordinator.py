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
  `leases.durationSeconds` or restarting never cuts a promise short.

`initialPosition: LATEST` means "what arrives from the consumer's creation on": it is
resolved to that instant (AT_TIMESTAMP), never re-read as LATEST when a shard moves before
its first checkpoint, so nothing that arrived meanwhile is skipped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from streamconsumer.core.leases import (
    ACTIVE,
    FINISHED,
    HANDOFF,
    RELEASED,
    Action,
    CheckpointRefused,
    EngineSettings,
    ShardLease,
    Withdrawn,
    WorkerLiveness,
    apply_checkpoint,
    collectable,
    finished_shards,
    plan,
    ready_shards,
)
from streamconsumer.core.lineage import (
    MAX_SHARD_ID_CHARS,
    MAX_TABLE_SHARDS,
    SHARD_END,
    Shard,
    TableOutOfBounds,
    compact,
    expand,
)
from streamconsumer.core.watchdog import Seen, Stuck, Watchdog
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
from streamconsumer.models.api import MAX_HELD_SHARDS, Failing, HeldShard, PassedOver
from streamconsumer.models.resource import (
    InitialPosition,
    LeaseState,
    ResetRecord,
    ResetRequest,
    StreamConsumerSpec,
)

PENDING_GRANT_HEARTBEAT_MS = 250
"""How soon a worker should come back while grants for it are being saved."""
MAX_PENDING_NOTES = 50
"""Passed-over notes waiting to be told as Events (each its worker, shard and action)."""


def expiry_grace(lease_seconds: float) -> float:
    """Covers one heartbeat in flight: the worker's fence runs from when it *sent* its
    last successful heartbeat, the operator's wait from when it *received* it."""
    return lease_seconds / 3


@dataclass(frozen=True)
class DurableState:
    """What the status holds of the lease table: the operator's only durable state."""

    leases: Mapping[str, ShardLease] = field(default_factory=dict)
    finished: frozenset[str] = frozenset()
    promised_lease_seconds: float | None = None
    last_reset: ResetRecord | None = None
    stream: str | None = None  # the incarnation of the stream the leases are of, once told
    stream_replaced: str | None = None  # another one listed under its name since


@dataclass
class WorkerProgress:
    expires_at: float  # operator clock: the longest promise made to it, plus the grace
    draining: bool = False
    millis_behind: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, Failing] = field(default_factory=dict)  # retries used up, policy block
    processed: dict[str, str] = field(default_factory=dict)  # the last record it processed
    failing: set[str] = field(default_factory=set)  # shards whose calls it reports failing


@dataclass(frozen=True)
class PassedOverNote:
    worker: str
    shard_id: str
    note: PassedOver


@dataclass(frozen=True)
class ShardChanges:
    """What a new listing changed: shards that appeared, and leases dropped because their
    shard left the stream before it was finished (retention)."""

    new: list[str]
    expired_unfinished: list[str]


class LeaseCoordinator:
    """Leases, checkpoints and workers of one consumer. `version` grows with every change
    the status must show; the status writer persists up to a version.

    Shared by the worker API, the consumer loop and the status writer, it is changed only
    through its methods, each the door of one party: the API's `heartbeat` (workers,
    their reports) and `checkpoint` (positions, releases); the loop's `step` (the lease
    engine's grants, hand-offs, expiries), `set_shards` (a listing), `set_backlog` (the
    probes), `take_passed_over`, `scaled_to` (the autoscaler) and `status_changed` (a
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
    ) -> None:
        self.spec = spec
        self.created = created  # the resource's creationTimestamp: where LATEST starts
        self.durable = durable
        self.leases: dict[str, ShardLease] = dict(durable.leases)
        self.finished: set[str] = set(durable.finished)
        self.shards: list[Shard] = []
        self._by_id: dict[str, Shard] = {}
        self.shards_known = False
        self._listings_started = 0
        self._listing = 0  # the number of the listing the shards come from
        self._shard_end_claims: dict[str, int] = {}  # shard -> listings started by then
        # Releases taken but not saved yet: (shard, worker, epoch) -> (the lease as
        # released, the version holding it). The worker repeats its release until it is
        # saved, while the shard may already be planned onward (and released again by its
        # next owner); the repeat is answered from here, never as a loss
        # (docs/design.md#hand-off-on-planned-moves).
        self._unsaved_releases: dict[tuple[str, str, int], tuple[ShardLease, int]] = {}
        self.workers: dict[str, WorkerProgress] = {}
        self.backlog: dict[str, int] = {}  # measured lag of shards nobody live owns
        self.passed_over: list[PassedOverNote] = []  # reported, not yet told as Events
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
        # The stuck-shard watchdog (docs/failure-policy.md#stuck-shards): its watches, the
        # leases it took from their owners (released once the owner's fence has closed),
        # what it finds stuck now, and what is still to be told as Events.
        self.watchdog = Watchdog()
        self.withdrawn: dict[str, Withdrawn] = {}
        self.stuck: list[Stuck] = []
        self.stuck_notes: list[Stuck] = []
        self._probing: dict[str, tuple[str, int, str | None, str | None]] = {}
        self._watch_offset = 0
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

    def take_passed_over(self) -> list[PassedOverNote]:
        """The passed-over notes reported since the last call, to be told as Events."""
        notes, self.passed_over = self.passed_over, []
        return notes

    # --- the engine ----------------------------------------------------------------

    def listing_started(self) -> int:
        """A listing of the stream starts: its number, for `set_shards`."""
        self._listings_started += 1
        return self._listings_started

    @property
    def relist_wanted(self) -> bool:
        """A SHARD_END waits for a listing started after it, and none has started yet."""
        return any(c >= self._listings_started for c in self._shard_end_claims.values())

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

    def replaced_stream(self) -> str | None:
        """What to tell while another stream is listed under the name, in words."""
        if self.stream_replaced is None:
            return None
        return (
            f"the stream was deleted and created again: the checkpoints are of {self.stream}, "
            f"the stream now is {self.stream_replaced}; every worker hands its shards off "
            "and none is read until the StreamConsumer is created anew (delete it and apply "
            "it again: it then starts at its initialPosition)"
        )

    def set_shards(self, shards: Sequence[Shard], listing: int | None = None) -> ShardChanges:
        """Takes a complete listing of the stream: the one numbered `listing` by
        `listing_started` (None: one started just now)."""
        self._listing = self.listing_started() if listing is None else listing
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
        self._by_id = {shard.id: shard for shard in shards}
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
        shards = self.shards if self.shards_known else self._started_shards()
        # Paused: every worker is treated as leaving, so each hands its shards off at
        # their positions (a planned move to nobody) and none is granted.
        paused = self.spec.paused or self.stream_replaced is not None
        liveness = [
            WorkerLiveness(name, progress.expires_at, progress.draining or paused)
            for name, progress in self.workers.items()
        ]
        # No worker holds more than a heartbeat may list.
        wanted = self.spec.leases.max_per_worker or MAX_HELD_SHARDS
        settings = EngineSettings(max_per_worker=min(wanted, MAX_HELD_SHARDS))
        self._watch(now)
        result = plan(shards, self.leases, liveness, now, settings, self.finished, self.withdrawn)
        self.leases = result.leases
        self.withdrawn = {
            shard_id: taken
            for shard_id, taken in self.withdrawn.items()
            if self._withdrawn(shard_id, taken.worker, taken.epoch)
        }
        if self.shards_known:  # collecting needs the stream's view of lineage
            listed = set(self._by_id)
            done = finished_shards(self.shards, self.leases, self.finished) & listed
            for shard_id in collectable(self.shards, self.leases):
                del self.leases[shard_id]
                self._changed()
            if not done <= self.finished:
                self.finished |= done
                self._changed()
        owners = {lease.owner for lease in self.leases.values()}
        for name, progress in list(self.workers.items()):
            if now > progress.expires_at and name not in owners:
                del self.workers[name]
                self._changed()
        if result.actions:
            self._changed()
        return result.actions

    # --- the stuck-shard watchdog ---------------------------------------------------

    def _watch(self, now: float) -> None:
        """Judges the owned shards; takes each newly stuck one from its owner (once per
        checkpoint). Its owner is told LOST from now on and renewed nothing for it, so
        its fence for the shard has closed by the longest promise it holds plus the
        grace: only then does the engine release the lease (`core.leases.Withdrawn`)."""
        before = [s.shard_id for s in self.stuck]
        self.stuck = self.watchdog.judge(self._seen(), now, self.spec.leases.stuck_shard_seconds)
        for verdict in self.stuck:
            progress = self.workers.get(verdict.owner)
            if verdict.revoke and progress is not None:
                closes_at = max(progress.expires_at, now)
                self.withdrawn[verdict.shard_id] = Withdrawn(
                    verdict.owner, verdict.epoch, closes_at
                )
            if verdict.new or verdict.revoke:
                self.stuck_notes.append(verdict)
        if [s.shard_id for s in self.stuck] != before:
            self._changed()  # the condition names them

    def _seen(self) -> dict[str, Seen]:
        """What the watchdog looks at: every owned shard not already withdrawn."""
        seen = {}
        for shard_id, lease in self.leases.items():
            owner = lease.owner
            if owner is None or lease.state not in (ACTIVE, HANDOFF):
                continue
            if lease.checkpoint == SHARD_END:
                continue  # read to its end: nothing can wait there (only its release)
            if shard_id in self.withdrawn:
                taken = self.withdrawn[shard_id]
                if taken.worker == owner and taken.epoch == lease.epoch:
                    # Still reported, at the position it was taken at: nothing its owner
                    # says of it counts now.
                    position = self.watchdog.position(shard_id)
                    processed = position[3] if position is not None else None
                    seen[shard_id] = Seen(owner, lease.epoch, lease.checkpoint, processed)
                    continue
            progress = self.workers.get(owner)
            report = progress or WorkerProgress(expires_at=0.0)
            seen[shard_id] = Seen(
                owner,
                lease.epoch,
                lease.checkpoint,
                processed=report.processed.get(shard_id),
                behind=report.millis_behind.get(shard_id, 0) > 0,
                failing=shard_id in report.failing,
            )
        return seen

    def _withdrawn(self, shard_id: str, worker: str, epoch: int) -> bool:
        """Is this lease taken from `worker` and still waiting for its fence to close?"""
        taken = self.withdrawn.get(shard_id)
        lease = self.leases.get(shard_id)
        return (
            taken is not None
            and taken.worker == worker
            and taken.epoch == epoch
            and lease is not None
            and lease.owner == worker
            and lease.epoch == epoch
        )

    def take_stuck_notes(self) -> list[Stuck]:
        """Shards found stuck, or taken from their owner, since the last call (Events)."""
        notes, self.stuck_notes = self.stuck_notes, []
        return notes

    def watch_probes(
        self, now: float, quiet_for: float, limit: int
    ) -> list[tuple[str, StartPosition]]:
        """Owned shards whose position has not moved for `quiet_for` seconds, and where
        nobody saw records waiting yet: probe each from its position (the last record its
        owner processed, else its checkpoint) to learn whether records wait there. At
        most `limit`, round robin. Off with the watchdog."""
        if not self.spec.leases.stuck_shard_seconds:
            return []
        quiet = [
            s
            for s in self.watchdog.quiet(now, quiet_for)
            if s not in self.withdrawn and self._still_watched(s)
        ]
        if not quiet:
            return []
        self._probing = {}  # a probe that failed tells nothing
        first = self._watch_offset % len(quiet)
        chosen = (quiet[first:] + quiet[:first])[:limit]
        self._watch_offset = first + len(chosen)
        probes = []
        for shard_id in chosen:
            position = self.watchdog.position(shard_id)
            assert position is not None
            self._probing[shard_id] = position
            processed = position[3]
            if processed is not None and processed != SHARD_END:
                start = StartPosition(
                    type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=processed
                )
            else:
                start = self.start_of(shard_id)
            probes.append((shard_id, start))
        return probes

    def _still_watched(self, shard_id: str) -> bool:
        """Its watch still describes its lease: the watches are judged at a step, and the
        lease may have finished (SHARD_END) or moved since (found by the soak: a finished
        shard was probed from "SHARD_END")."""
        lease = self.leases.get(shard_id)
        position = self.watchdog.position(shard_id)
        return (
            lease is not None
            and position is not None
            and lease.state in (ACTIVE, HANDOFF)
            and lease.checkpoint != SHARD_END
            and position[:2] == (lease.owner, lease.epoch)
        )

    def watch_probed(self, measured: Mapping[str, int | None], now: float) -> None:
        """The outcome of `watch_probes`: a backlog found means records wait there."""
        probing, self._probing = self._probing, {}
        for shard_id, position in probing.items():
            if measured.get(shard_id):
                self.watchdog.records_wait(shard_id, position, now)

    def stuck_shards(self) -> list[str]:
        """What the condition says of the stuck shards, most waited first."""
        return [
            s.describe() + ("; its lease is withdrawn" if s.shard_id in self.withdrawn else "")
            for s in sorted(self.stuck, key=lambda s: (-s.seconds, s.shard_id))
        ]

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
                or self._withdrawn(shard_id, name, claim.epoch)  # stuck: fenced out
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
        progress.millis_behind = {
            h.shard_id: h.millis_behind_latest for h in owned if h.millis_behind_latest is not None
        }
        blocked = {h.shard_id: h.failing for h in owned if h.failing and h.failing.blocked}
        if blocked.keys() != progress.blocked.keys():
            self._changed()  # Degraded names the blocked shards
        progress.blocked = blocked
        progress.processed = {h.shard_id: h.sequence_number for h in owned if h.sequence_number}
        progress.failing = {h.shard_id for h in owned if h.failing}
        self._note_passed_over(name, owned)
        assignments = []
        pending = False
        for lease in list(self.leases.values()):
            if lease.owner != name or self._withdrawn(lease.shard_id, name, lease.epoch):
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
        if progress.draining and not held and name not in self._owners():
            del self.workers[name]  # it has let go of everything and is leaving
            self._changed()
        return HeartbeatResponse(
            lease_duration_ms=int(promise * 1000),
            assignments=assignments,
            revocations=revocations,
            next_heartbeat_ms=PENDING_GRANT_HEARTBEAT_MS if pending else None,
        )

    def _note_passed_over(self, worker: str, owned: Sequence[HeldShard]) -> None:
        """Queues the notes for Events: one per worker, shard and action, adding up what
        arrives before the loop tells them, and at most MAX_PENDING_NOTES of them (the
        rest are dropped: Events are notices, the worker's metrics and log keep count)."""
        index = {(n.worker, n.shard_id, n.note.action): i for i, n in enumerate(self.passed_over)}
        for claim in owned:
            for note in claim.passed_over:
                key = (worker, claim.shard_id, note.action)
                if key in index:
                    pending = self.passed_over[index[key]]
                    self.passed_over[index[key]] = replace(pending, note=pending.note.merged(note))
                elif len(self.passed_over) < MAX_PENDING_NOTES:
                    index[key] = len(self.passed_over)
                    self.passed_over.append(PassedOverNote(worker, claim.shard_id, note))

    def _started_shards(self) -> list[Shard]:
        return [
            Shard(shard_id)
            for shard_id, lease in sorted(self.leases.items())
            if lease.epoch > 0 and lease.state is not FINISHED
        ]

    def _owners(self) -> set[str | None]:
        return {lease.owner for lease in self.leases.values()}

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
        if lease.start is not None:  # a reset
            if lease.start.timestamp is None:
                return StartPosition(type=StartPositionType.TRIM_HORIZON)
            return StartPosition(
                type=StartPositionType.AT_TIMESTAMP, timestamp=lease.start.timestamp
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
        if initial is InitialPosition.LATEST:
            # Not LATEST itself: read again at each move, it would skip what arrived
            # between a grant and the shard's first checkpoint.
            return StartPosition(type=StartPositionType.AT_TIMESTAMP, timestamp=self.created)
        return StartPosition(type=StartPositionType.TRIM_HORIZON)

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
        if self._withdrawn(request.shard_id, request.worker, request.epoch):
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
        worker usually reads a shard's end before the operator lists again after a
        reshard: an open shard in the listing is taken as "not known yet" (deferred, and a
        listing asked for) until a listing made after the claim still shows it open."""
        if request.sequence_number != SHARD_END or not self.shards_known:
            return None if not self.shards_known else False
        shard = self._by_id.get(request.shard_id)
        if shard is not None and shard.closed:
            self._shard_end_claims.pop(request.shard_id, None)
            return True
        claimed = self._shard_end_claims.setdefault(request.shard_id, self._listings_started)
        if self._listing > claimed:
            return False  # listed by a listing started after the claim: still open, refused
        return None  # come back: a listing is asked for (relist_wanted)

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
        wanted = set(request.shards) if request.shards else listed
        reset = []
        for shard_id in sorted(wanted & listed - self.finished):
            lease = self.leases.get(shard_id) or ShardLease(shard_id)
            if lease.state is FINISHED:
                continue
            if lease.owner is None:
                lease = replace(lease, checkpoint=None, start=request.to, resetting=False)
            else:
                lease = replace(lease, start=request.to, resetting=True)
            self.leases[shard_id] = lease
            reset.append(shard_id)
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
        # The adopted table decides who owns what: a withdrawal not saved is forgotten
        # (its owner is renewed again, which is safe) and the watch starts over.
        self.watchdog, self.withdrawn, self.stuck, self._probing = Watchdog(), {}, [], {}
        self._unsaved_releases = {}  # the adopted table decides; a repeat is judged by it
        if self.shards_known:
            self.set_shards(self.shards, self._listing)  # drops leases of shards gone since
        asked = self._reset_asked
        if asked is not None and (self.last_reset is None or self.last_reset.id != asked.id):
            self.request_reset(asked)  # asked for, not saved yet: the adopted table lacks it
        self._changed()

    # --- views ---------------------------------------------------------------------

    def claimable_shards(self) -> int:
        """How many shards a worker's heartbeat may list: at most every shard known."""
        return max(len(self.leases), len(self.shards))

    def assignable(self) -> list[str]:
        """Shards a worker may hold now (not finished, parents done)."""
        return ready_shards(self.shards, self.leases, self.finished)

    def unowned(self, now: float) -> list[str]:
        """Assignable shards that no live worker holds or is about to hold."""
        live = {n for n, p in self.workers.items() if now <= p.expires_at and not p.draining}
        out = []
        for shard_id in self.assignable():
            lease = self.leases.get(shard_id)
            if lease is None or (lease.owner not in live and lease.handoff_to not in live):
                out.append(shard_id)
        return out

    def start_of(self, shard_id: str) -> StartPosition:
        """Where a new owner of the shard would start reading."""
        lease = self.leases.get(shard_id) or ShardLease(shard_id)
        shard = self._by_id.get(shard_id)
        return self._start_position(lease, list(shard.parents) if shard else [])

    def set_backlog(self, measured: Mapping[str, int | None], now: float) -> None:
        """Lag measured by the operator itself for shards without a live owner (a
        consumer scaled to zero, or shards left over by maxPerWorker)."""
        unowned = set(self.unowned(now))
        self.backlog = {
            sid: millis for sid, millis in measured.items() if millis and sid in unowned
        }

    def blocked_shards(self) -> list[str]:
        """What Degraded says of shards whose failing batch blocks them (policy block)."""
        return [
            f"{shard_id} blocked on {name}: {f.attempts} attempts in {f.seconds:.0f}s: {f.error}"
            for name, progress in sorted(self.workers.items())
            for shard_id, f in sorted(progress.blocked.items())
            if (lease := self.leases.get(shard_id)) is not None and lease.owner == name
        ]

    def lag_millis(self) -> dict[str, int]:
        """What each owner last reported; for shards nobody live owns, what the operator
        measured itself (a draining owner's last report must not hide a backlog)."""
        lag: dict[str, int] = {}
        for name, progress in self.workers.items():
            for shard_id, millis in progress.millis_behind.items():
                lease = self.leases.get(shard_id)
                if lease is not None and lease.owner == name:
                    lag[shard_id] = millis
        lag.update(self.backlog)
        return lag

    def status_leases(self) -> dict[str, Lease]:
        lag = self.lag_millis()
        return {
            shard_id: Lease(
                owner=lease.owner,
                epoch=lease.epoch,
                checkpoint=lease.checkpoint,
                parents=list(self._by_id[shard_id].parents) if shard_id in self._by_id else [],
                state=lease.state,
                handoff_to=lease.handoff_to,
                start=lease.start,
                resetting=lease.resetting,
                millis_behind_latest=lag.get(shard_id) if lease.owner else None,
            )
            for shard_id, lease in sorted(self.leases.items())
        }


def creation_time(resource: Mapping[str, Any]) -> datetime:
    """The resource's creationTimestamp: the instant `initialPosition: LATEST` starts at."""
    return datetime.fromisoformat(resource["metadata"]["creationTimestamp"])


def durable_from_status(status: Mapping[str, Any] | None) -> DurableState:
    """The durable state as the status last persisted it; raises ValueError (pydantic's
    among them) for a table this operator cannot read, TableOutOfBounds for one larger
    than any stream's (a kept table or lease group is a tenant's ConfigMap)."""
    status = status or {}
    stored = status.get("leases") or {}
    listed = status.get("finishedShards") or []
    if not isinstance(stored, Mapping) or not isinstance(listed, list):
        raise ValueError("leases must be a table and finishedShards a list")
    if len(stored) > MAX_TABLE_SHARDS or any(len(sid) > MAX_SHARD_ID_CHARS for sid in stored):
        raise TableOutOfBounds(
            f"the leases name more than {MAX_TABLE_SHARDS:,} shards, or an id longer than "
            f"{MAX_SHARD_ID_CHARS} characters"
        )
    if any(
        isinstance(body, Mapping) and body.get("state") == LeaseState.IN_LEASE_GROUPS
        for body in stored.values()
    ):
        raise ValueError("a table kept in lease groups was read without its groups")
    finished = expand(listed, MAX_TABLE_SHARDS - len(stored))
    leases = {}
    for shard_id, body in stored.items():
        lease = Lease.model_validate(body)
        leases[shard_id] = ShardLease(
            shard_id=shard_id,
            owner=lease.owner,
            epoch=lease.epoch,
            checkpoint=lease.checkpoint,
            state=lease.state,
            handoff_to=lease.handoff_to,
            start=lease.start,
            resetting=lease.resetting,
        )
    promised = status.get("promisedLeaseSeconds")
    last_reset = status.get("lastReset")
    return DurableState(
        leases=leases,
        finished=frozenset(finished),
        promised_lease_seconds=float(promised) if promised is not None else None,
        last_reset=ResetRecord.model_validate(last_reset) if last_reset else None,
        stream=stream if isinstance(stream := status.get("stream"), str) else None,
        stream_replaced=other if isinstance(other := status.get("streamReplaced"), str) else None,
    )


def durable_fields(snapshot: DurableState) -> dict[str, Any]:
    """The status fields that carry a snapshot (the rest of the status is a view)."""
    return {
        "finishedShards": compact(snapshot.finished),
        "promisedLeaseSeconds": snapshot.promised_lease_seconds,
        "lastReset": snapshot.last_reset.wire() if snapshot.last_reset else None,
        "stream": snapshot.stream,
        "streamReplaced": snapshot.stream_replaced,
    }
