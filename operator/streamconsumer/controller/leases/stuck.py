"""The stuck-shard watchdog's bookkeeping for one lease table
(docs/failure-policy.md#stuck-shards): its watches, the leases it took from their owners
(released once the owner's fence has closed), what it finds stuck now, what is still to
be told as Events, and the probes that learn whether records wait behind a quiet shard.
The coordinator owns one and hands it the table; `core.watchdog` decides."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from streamconsumer.controller.leases.state import WorkerProgress
from streamconsumer.core.leases import ACTIVE, HANDOFF, ShardLease, Withdrawn
from streamconsumer.core.lineage import SHARD_END
from streamconsumer.core.watchdog import Seen, Stuck, Watchdog
from streamconsumer.models import StartPosition, StartPositionType

Leases = Mapping[str, ShardLease]
Workers = Mapping[str, WorkerProgress]


class StuckShards:
    def __init__(self) -> None:
        self.watchdog = Watchdog()
        self.withdrawn: dict[str, Withdrawn] = {}
        self.stuck: list[Stuck] = []
        self.notes: list[Stuck] = []
        self._probing: dict[str, tuple[str, int, str | None, str | None]] = {}
        self._watch_offset = 0

    def forget(self) -> None:
        """Another writer's table was adopted: it decides who owns what, so a withdrawal
        not saved is forgotten (its owner is renewed again, which is safe) and the watch
        starts over."""
        self.watchdog, self.withdrawn, self.stuck, self._probing = Watchdog(), {}, [], {}

    def judge(
        self, leases: Leases, workers: Workers, now: float, stuck_seconds: float | None
    ) -> bool:
        """Judges the owned shards; takes each newly stuck one from its owner (once per
        checkpoint). Its owner is told LOST from now on and renewed nothing for it, so
        its fence for the shard has closed by the longest promise it holds plus the
        grace: only then does the engine release the lease (`core.leases.Withdrawn`).
        True if the shards found stuck changed (the condition names them)."""
        before = [s.shard_id for s in self.stuck]
        self.stuck = self.watchdog.judge(self._seen(leases, workers), now, stuck_seconds)
        for verdict in self.stuck:
            progress = workers.get(verdict.owner)
            if verdict.revoke and progress is not None:
                closes_at = max(progress.expires_at, now)
                self.withdrawn[verdict.shard_id] = Withdrawn(
                    verdict.owner, verdict.epoch, closes_at
                )
            if verdict.new or verdict.revoke:
                self.notes.append(verdict)
        return [s.shard_id for s in self.stuck] != before

    def _seen(self, leases: Leases, workers: Workers) -> dict[str, Seen]:
        """What the watchdog looks at: every owned shard not already withdrawn."""
        seen = {}
        for shard_id, lease in leases.items():
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
            progress = workers.get(owner)
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

    def holds(self, leases: Leases, shard_id: str, worker: str, epoch: int) -> bool:
        """Is this lease taken from `worker` and still waiting for its fence to close?"""
        taken = self.withdrawn.get(shard_id)
        lease = leases.get(shard_id)
        return (
            taken is not None
            and taken.worker == worker
            and taken.epoch == epoch
            and lease is not None
            and lease.owner == worker
            and lease.epoch == epoch
        )

    def prune(self, leases: Leases) -> None:
        """Drops the withdrawals the engine has carried out (the lease moved on)."""
        self.withdrawn = {
            shard_id: taken
            for shard_id, taken in self.withdrawn.items()
            if self.holds(leases, shard_id, taken.worker, taken.epoch)
        }

    def take_notes(self) -> list[Stuck]:
        """Shards found stuck, or taken from their owner, since the last call (Events)."""
        notes, self.notes = self.notes, []
        return notes

    def probes(
        self,
        leases: Leases,
        now: float,
        quiet_for: float,
        limit: int,
        start_of: Callable[[str], StartPosition],
    ) -> list[tuple[str, StartPosition]]:
        """Owned shards whose position has not moved for `quiet_for` seconds, and where
        nobody saw records waiting yet: probe each from its position (the last record its
        owner processed, else where a new owner would start) to learn whether records
        wait there. At most `limit`, round robin."""
        quiet = [
            s
            for s in self.watchdog.quiet(now, quiet_for)
            if s not in self.withdrawn and self._still_watched(leases, s)
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
                start = start_of(shard_id)
            probes.append((shard_id, start))
        return probes

    def _still_watched(self, leases: Leases, shard_id: str) -> bool:
        """Its watch still describes its lease: the watches are judged at a step, and the
        lease may have finished (SHARD_END) or moved since (found by the soak: a finished
        shard was probed from "SHARD_END")."""
        lease = leases.get(shard_id)
        position = self.watchdog.position(shard_id)
        return (
            lease is not None
            and position is not None
            and lease.state in (ACTIVE, HANDOFF)
            and lease.checkpoint != SHARD_END
            and position[:2] == (lease.owner, lease.epoch)
        )

    def probed(self, measured: Mapping[str, int | None], now: float) -> None:
        """The outcome of `probes`: a backlog found means records wait there."""
        probing, self._probing = self._probing, {}
        for shard_id, position in probing.items():
            if measured.get(shard_id):
                self.watchdog.records_wait(shard_id, position, now)

    def described(self) -> list[str]:
        """What the condition says of the stuck shards, most waited first."""
        return [
            s.describe() + ("; its lease is withdrawn" if s.shard_id in self.withdrawn else "")
            for s in sorted(self.stuck, key=lambda s: (-s.seconds, s.shard_id))
        ]
