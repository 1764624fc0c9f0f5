"""The per-consumer loop, as a sans-I/O class: it decides what is due (list the shards,
probe unowned shards' backlog, step the engine, write the status, scale) and takes the
outcome of each job; `runner.py` executes the jobs against Kinesis and Kubernetes, and
the simulator executes them against its own stream and apiserver.

No outcome stops it but one: a failed listing keeps the last one, a failed status write
is retried with back-off, each shown as an Event and a `Degraded` condition; a newer term
that fenced the status ends it (`deposed_by`).

It serves workers only once a status write of its own has landed: that first write is
the term's fence (docs/design.md#term-fence), so nothing it grants or renews can rest
on a table that a late write from an older term may still replace."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from streamconsumer.controller.consumer.autoscaler import Autoscaler
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.notes import PassedOverNote
from streamconsumer.controller.leases.render import Children, Generations, render
from streamconsumer.controller.leases.state import DurableState, ShardChanges
from streamconsumer.controller.workloads.worker_health import WORKERS_NOT_STARTING, WorkerHealth
from streamconsumer.core.leases import (
    FINISHED,
    Action,
    CancelHandoff,
    Expire,
    Grant,
    Reclaim,
    Revoke,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.core.watchdog import Stuck
from streamconsumer.models import StartPosition
from streamconsumer.models.resource import Condition


class Event(NamedTuple):
    type: str  # Normal | Warning
    reason: str
    message: str


PROBES_PER_ROUND = 32  # a consumer's backlog probes per listing period, at most
PROBE_BURST = 2 * PROBES_PER_ROUND  # the operator's probe budget at once: two full rounds


@dataclass(frozen=True)
class LoopSettings:
    shard_sync_seconds: float = 10.0
    # A finished shard whose children the last listing did not show: list again this
    # soon, doubling up to shard_sync_seconds while they stay unlisted.
    relist_seconds: float = 1.0
    status_interval_seconds: float = 1.0
    write_backoff_seconds: float = 1.0
    write_backoff_cap_seconds: float = 30.0
    # Unowned shards whose backlog is measured per listing (round robin).
    probe_limit: int = PROBES_PER_ROUND


@dataclass(frozen=True)
class StatusWrite:
    """A status to write, and what the coordinator learns once it is written."""

    body: dict[str, Any]
    snapshot: DurableState
    version: int


def describe(action: Action) -> Event:
    if isinstance(action, Grant):
        return Event(
            "Normal", "LeaseGranted", f"{action.shard_id} to {action.worker} (epoch {action.epoch})"
        )
    if isinstance(action, Revoke):
        to = action.to or "nobody yet"
        return Event("Normal", "HandOff", f"{action.shard_id} from {action.worker} to {to}")
    if isinstance(action, CancelHandoff):
        return Event("Normal", "HandOffCancelled", f"{action.shard_id} stays with {action.worker}")
    if isinstance(action, Reclaim):
        return Event(
            "Warning",
            "StuckLeaseReleased",
            f"{action.shard_id}: {action.worker}'s fence for epoch {action.epoch} has closed; "
            "the shard is granted again from its checkpoint",
        )
    assert isinstance(action, Expire)
    shards = ", ".join(action.shard_ids) or "no shards"
    return Event("Warning", "LeaseExpired", f"{action.worker} went silent; released {shards}")


def describe_stuck(stuck: Stuck) -> Event:
    if stuck.revoke:
        return Event(
            "Warning",
            "ShardStuck",
            f"{stuck.describe()}; the lease is withdrawn from {stuck.owner} and granted "
            "again once its fence has closed",
        )
    return Event(
        "Warning",
        "ShardStuck",
        f"{stuck.describe()}; it was withdrawn once at this checkpoint already: it stays "
        "where it is (restart its worker, or look at the processor)",
    )


def describe_passed_over(passed: PassedOverNote) -> Event:
    note = passed.note
    reason, verb = (
        ("RecordsSkipped", "skipped")
        if note.action == "skip"
        else ("RecordsDeadLettered", "dead-lettered")
    )
    return Event(
        "Warning",
        reason,
        f"{passed.shard_id}: {note.count} records {verb} by {passed.worker} "
        f"({note.first_sequence}..{note.last_sequence}): {note.error}",
    )


class ConsumerLoop:
    def __init__(
        self,
        name: str,
        coordinator: LeaseCoordinator,
        settings: LoopSettings,
        generation: Callable[[], int | None],
        autoscaler: Autoscaler | None = None,
        paused_by: str | None = None,
        observed_generation: int | None = None,
    ) -> None:
        self.name = name
        self.coordinator = coordinator
        self.settings = settings
        self.generation = generation  # the spec's, as the object has it now
        # The generation whose workers run (the registry's word; the stored status's
        # until then): what kstatus and Argo CD compare with the object's generation.
        self.observed_generation = observed_generation
        self.autoscaler = autoscaler
        self.events: list[Event] = []
        self.source_error: str | None = None
        self.write_error: str | None = None
        self.children = Children()  # how applying the workers' objects went
        self.workers_health: WorkerHealth | None = None  # None: not observed yet
        self.paused_by = paused_by  # who asked for the pause in force (audit.py)
        self.conditions: list[Condition] = []
        self._syncing = False
        self._listing: int | None = None  # the number of the listing under way
        self._last_sync = -float("inf")
        self._relist_wait = settings.relist_seconds
        self._writing = False
        self._next_write = -float("inf")
        self._write_failures = 0
        self._last_probe = -float("inf")
        self._probe_offset = 0
        self._fenced = False  # a write of ours has landed: workers may be served
        self.deposed: str | None = None  # why a newer term ended this loop
        self._told_complete = coordinator.completed  # a Complete Event, once

    @property
    def serving(self) -> bool:
        """May the worker API answer from this loop's coordinator?"""
        return self._fenced and self.deposed is None

    def deposed_by(self, reason: str) -> None:
        """A newer term fenced the status: this loop must never grant or write again."""
        self.deposed = reason

    def pause_asked(self, by: str | None) -> None:
        """Who paused the consumer (None: it runs), shown in status."""
        if by != self.paused_by:
            self.paused_by = by
            self.coordinator.status_changed()

    def children_applied(self, error: str | None) -> None:
        """The outcome of applying the workers' objects (None: all applied)."""
        self.children_now(Children(known=True, error=error))

    def children_now(self, children: Children) -> None:
        """How applying the workers' objects went, as the reconcile last knew it."""
        if children != self.children:
            self.children = children
            self.coordinator.status_changed()

    def observed_now(self, generation: int) -> None:
        """The workers run this generation's spec (or it got a verdict)."""
        if generation != self.observed_generation:
            self.observed_generation = generation
            self.coordinator.status_changed()

    def deployment_read(self, replicas: int, read_at: float) -> bool:
        """The workers' Deployment's replicas as a read started at `read_at` found them;
        True when the autoscaler did not know (it decides again from them)."""
        return self.autoscaler is not None and self.autoscaler.deployment_read(replicas, read_at)

    def workers_now(self, health: WorkerHealth) -> None:
        """Whether the workers' pods start, as the pod watch and the Deployment last said:
        an Event when they stop starting and when they start again (not at each turn of
        the kubelet's back-off: ErrImagePull and ImagePullBackOff alternate)."""
        if health == self.workers_health:
            return
        before = self.workers_health.not_starting() if self.workers_health else None
        now = health.not_starting()
        if now is not None and before is None:
            self.events.append(Event("Warning", WORKERS_NOT_STARTING, now))
        elif now is None and before is not None:
            self.events.append(Event("Normal", "WorkersStarting", "no worker pod fails to start"))
        self.workers_health = health
        self.coordinator.status_changed()

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    # --- shard sync -------------------------------------------------------------------

    def sync_due(self, now: float) -> bool:
        if self._syncing or self.coordinator.completed:
            return False  # Complete: the stream is done with (docs/replaying.md)
        if now - self._last_sync >= self.settings.shard_sync_seconds:
            return True
        if self.coordinator.stream_replaced is not None:
            return False  # stopped: no listing is applied, no child is waited for
        if self.coordinator.listings.relist_wanted:  # a SHARD_END waits for a fresher listing
            return now - self._last_sync >= self.settings.relist_seconds
        return self._children_unknown() and now - self._last_sync >= self._relist_wait

    def _children_unknown(self) -> bool:
        coordinator = self.coordinator
        parents = {p for shard in coordinator.shards for p in shard.parents}
        return any(
            lease.state is FINISHED and shard_id not in parents
            for shard_id, lease in coordinator.leases.items()
        )

    def sync_started(self, now: float) -> bool:
        """A listing starts; True: it must tell which stream it lists whatever it finds
        (the table does not know yet, or another stream was seen). Otherwise it tells
        only if the shards changed (`driver._listing`): a stream deleted and created
        again under its name lists other starting sequence numbers at least."""
        self._syncing, self._last_sync = True, now
        self._listing = self.coordinator.listings.start()
        return self.coordinator.stream is None or self.coordinator.stream_replaced is not None

    def sync_succeeded(
        self, shards: Sequence[Shard], now: float, stream: str | None = None
    ) -> None:
        """A listing, and the stream it is of where it was asked (`sync_started`)."""
        self._syncing = False
        if self.source_error is not None:
            self.source_error = None
            self.events.append(Event("Normal", "StreamAvailable", "listing shards again"))
            self.coordinator.status_changed()  # the condition changes
        if stream is not None:
            coordinator, replaced = self.coordinator, self.coordinator.stream_replaced
            if not coordinator.listed_stream(stream):  # never applied to this table
                if coordinator.stream_replaced != replaced:
                    message = coordinator.replaced_stream() or ""
                    self.events.append(Event("Warning", "StreamRecreated", message))
                return
        changes: ShardChanges = self.coordinator.set_shards(shards, self._listing)
        if changes.new:
            self.events.append(
                Event("Normal", "Resharded", f"new shards: {', '.join(changes.new)}")
            )
        if waiting := [s for s in shards if s.waits_for and s.id in changes.new]:
            first = sorted({shard_id for shard in waiting for shard_id in shard.waits_for})
            end = "is read to its end" if len(first) == 1 else "are read to their end"
            new, old = ", ".join(s.id for s in waiting), ", ".join(first)
            message = f"a new stream's {new} starts once {old} {end}"
            self.events.append(Event("Normal", "StreamReplaced", message))
        for shard_id in changes.expired_unfinished:
            self.events.append(
                Event(
                    "Warning",
                    "ShardExpired",
                    f"{shard_id} left the stream (retention) before it was fully consumed",
                )
            )
        self._relist_wait = (
            min(self._relist_wait * 2, self.settings.shard_sync_seconds)
            if self._children_unknown()
            else self.settings.relist_seconds
        )

    def sync_failed(self, error: str, now: float) -> None:
        self._syncing = False
        if self.source_error is None:
            self.events.append(Event("Warning", "StreamUnavailable", error))
        if error != self.source_error:
            self.coordinator.status_changed()
        self.source_error = error

    # --- backlog of unowned shards ----------------------------------------------------

    def probes_due(self, now: float, allowed: int | None = None) -> list[tuple[str, StartPosition]]:
        """Unowned shards to measure the backlog of (so lag shows with no worker), no
        more than `allowed` (what the operator's probe budget has left; None: no cap)."""
        if now - self._last_probe < self.settings.shard_sync_seconds or allowed == 0:
            return []
        if self.coordinator.completed:
            return []
        self._last_probe = now
        limit = self.settings.probe_limit
        if allowed is not None:
            limit = min(limit, allowed)
        # Owned shards that have not moved for a sync period: do records wait there?
        # (The stuck-shard watchdog; none while it is off.)
        watched = self.coordinator.watch_probes(now, self.settings.shard_sync_seconds, limit)
        unowned = self.coordinator.unowned(now)
        if not unowned:
            self.coordinator.set_backlog({}, now)
            return watched
        # Within the budget, the watched ones come first (they are at most `limit`).
        room = limit if allowed is None else limit - len(watched)
        start = self._probe_offset % len(unowned)
        chosen = (unowned[start:] + unowned[:start])[:room]
        self._probe_offset = start + len(chosen)
        return [(shard_id, self.coordinator.start_of(shard_id)) for shard_id in chosen] + watched

    def probes_done(self, measured: dict[str, int | None], now: float) -> None:
        self.coordinator.set_backlog(measured, now)
        self.coordinator.watch.probed(measured, now)

    # --- the engine -------------------------------------------------------------------

    def step(self, now: float) -> list[Action]:
        if not self._fenced:
            return []  # nothing is decided before the term's fence has landed
        actions = self.coordinator.step(now)
        if self.coordinator.completed and not self._told_complete:
            self._told_complete = True
            self.events.append(Event("Normal", "Complete", self.coordinator.bound.said()))
        self.events.extend(map(describe_stuck, self.coordinator.watch.take_notes()))
        self.events.extend(describe(action) for action in actions)
        self.events.extend(map(describe_passed_over, self.coordinator.passed_over.take()))
        return actions

    def autoscale(self, now: float) -> tuple[int, int, float] | None:
        """(from, to, lag seconds) when the lag autoscaler wants another worker count."""
        coordinator = self.coordinator
        if coordinator.completed:  # a bounded consumer's workers are done
            replicas = self.autoscaler.replicas if self.autoscaler is not None else 0
            return (replicas, 0, 0.0) if replicas else None
        stopped = coordinator.spec.paused or coordinator.stream_replaced is not None
        if self.autoscaler is None or not coordinator.shards_known or stopped:
            return None  # paused: the backlog grows by design, workers stay as they are
        lag = max(self.coordinator.lag_millis().values(), default=0) / 1000
        # It counts pods; each runs processor.processes workers, each with shards of its own.
        pods_with_work = math.ceil(
            len(self.coordinator.assignable()) / coordinator.spec.processor.processes
        )
        autoscaling = coordinator.spec.autoscaling
        if coordinator.spec.end is not None and autoscaling is not None:
            # A bounded consumer's quiet shards end only by being read after the end: at
            # least one worker until it is Complete, however little the lag.
            least = max(autoscaling.min_replicas, 1)
            autoscaling = autoscaling.model_copy(update={"min_replicas": least})
        decided = self.autoscaler.decide(now, autoscaling, lag, pods_with_work)
        return None if decided is None else (decided[0], decided[1], lag)

    def scaled(self, before: int, after: int, lag: float, now: float) -> None:
        assert self.autoscaler is not None
        self.autoscaler.scaled(after, now)
        self.events.append(
            Event("Normal", "Scaled", f"workers {before} -> {after}: lag {lag:.1f}s")
        )
        self.coordinator.scaled_to(after)

    # --- the status -------------------------------------------------------------------

    def write_due(self, now: float) -> StatusWrite | None:
        coordinator = self.coordinator
        unchanged = coordinator.version <= coordinator.persisted_version and self._fenced
        if self._writing or self.deposed is not None or unchanged or now < self._next_write:
            return None
        self._writing = True
        version = coordinator.version
        snapshot = coordinator.snapshot(now)
        not_starting = self.workers_health.not_starting() if self.workers_health else None
        # Complete: what the stream does now is none of its business.
        source_error = None if coordinator.completed else self.source_error
        problems = [
            p for p in (source_error, self.write_error, self.children.error, not_starting) if p
        ]
        problems += coordinator.blocked_shards()
        problems += coordinator.watch.described()
        status = render(
            self.name,
            coordinator,
            snapshot,
            Generations(spec=self.generation(), observed=self.observed_generation),
            self.conditions,
            problems,
            paused_by=self.paused_by,
            children=self.children,
            workers_health=self.workers_health,
        )
        self.conditions = status.conditions
        return StatusWrite(status.wire(), snapshot, version)

    def write_succeeded(self, write: StatusWrite, now: float) -> None:
        self._writing = False
        self._next_write = now + self.settings.status_interval_seconds
        self._write_failures = 0
        self.coordinator.persisted(write.snapshot, write.version)
        if not self._fenced:
            self._fenced = True
            # Workers could renew nothing until now: their restart wait starts now.
            self.coordinator.grant_restart_wait(now)
        if self.write_error is not None:
            self.write_error = None
            self.coordinator.status_changed()  # clear the condition

    def write_failed(self, write: StatusWrite, error: str, now: float) -> None:
        """Transient (5xx, timeout) or invalid (422): retried with back-off either way —
        an operator upgrade or a CRD fix may cure the second."""
        self._writing = False
        if self.write_error is None:
            self.events.append(Event("Warning", "StatusWriteFailed", error))
        self.write_error = f"status write failed: {error}"
        delay = self.settings.write_backoff_seconds * 2**self._write_failures
        self._next_write = now + min(delay, self.settings.write_backoff_cap_seconds)
        self._write_failures += 1

    def write_stale(self, current: DurableState, now: float) -> None:
        """Another writer saved a different lease table: adopt it rather than fight."""
        self._writing = False
        self._fenced = False  # serve again only once a write on the adopted table lands
        self.events.append(
            Event("Warning", "StatusChangedElsewhere", "another writer saved the lease table")
        )
        self.coordinator.adopt(current, now)
