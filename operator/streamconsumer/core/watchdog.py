"""The stuck-shard watchdog: which owned shards have records waiting while their position
has not moved for longer than `leases.stuckShardSeconds`, and which of them to take from
their owner. Pure and deterministic — time is an argument — so the coordinator, the
simulation and the tests run the same decision (docs/failure-policy.md#stuck-shards).

The signal, from what the operator really has:
- **Position**: the lease's owner and epoch, its checkpoint, and the last record the owner
  reports processed (its heartbeat's `sequenceNumber`, which moves before a batching
  processor checkpoints). Any change starts the watch over.
- **Records wait**: the owner reports `millisBehindLatest` > 0 (records exist beyond what
  its reader has read, so beyond the position), or the operator's own probe from the
  position found a record (`records_wait`, a GetRecords of one record).
- A shard is **stuck** once records were first seen waiting at an unchanged position
  `stuck_after` seconds ago. Records that arrived just now never count: the clock starts
  when they are first seen, not when the position last moved, so a quiet shard whose
  first record in an hour arrives is not stuck.
- A shard whose owner reports its calls failing (retries, a block, a hung call) is the
  failure policy's: reported as blocked there, never revoked here.

A stuck shard is revoked once per checkpoint: taken again only after its checkpoint has
moved, so a shard that stays stuck under its next owner stays reported and is not
revoked in a loop."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Seen:
    """What the operator knows now of one owned shard."""

    owner: str
    epoch: int
    checkpoint: str | None
    processed: str | None = None  # the last record the owner reports processed
    behind: bool = False  # the owner's last report says records wait (millisBehindLatest > 0)
    failing: bool = False  # the owner reports its calls failing: the failure policy's

    @property
    def position(self) -> tuple[str, int, str | None, str | None]:
        return (self.owner, self.epoch, self.checkpoint, self.processed)


@dataclass(frozen=True, slots=True)
class Watch:
    position: tuple[str, int, str | None, str | None]
    since: float  # when this position was first seen
    waiting_since: float | None = None  # when records were first seen waiting at it
    reported: bool = False  # told as stuck (an Event) at this position


@dataclass(frozen=True, slots=True)
class Stuck:
    shard_id: str
    owner: str
    epoch: int
    checkpoint: str | None
    seconds: float  # how long records have been seen waiting at this position
    revoke: bool  # this verdict takes the shard from its owner
    new: bool  # first reported at this position (tell it as an Event)

    def describe(self) -> str:
        where = self.checkpoint or "its start"
        return (
            f"{self.shard_id} stuck on {self.owner} (epoch {self.epoch}): records have waited "
            f"{self.seconds:.0f}s at checkpoint {where}"
        )


@dataclass(slots=True)
class Watchdog:
    """The watches of one consumer's owned shards, and the checkpoint each revoked shard
    was revoked at."""

    watches: dict[str, Watch] = field(default_factory=dict)
    revoked_at: dict[str, str | None] = field(default_factory=dict)

    def judge(self, seen: Mapping[str, Seen], now: float, stuck_after: float | None) -> list[Stuck]:
        """Updates the watches from what is seen now; returns the stuck shards (none
        when `stuck_after` is None or 0: the watchdog is off)."""
        watches: dict[str, Watch] = {}
        for shard_id, what in seen.items():
            watch = self.watches.get(shard_id)
            if watch is None or watch.position != what.position:
                watch = Watch(what.position, now)
            if what.behind and watch.waiting_since is None:
                watch = replace(watch, waiting_since=now)
            watches[shard_id] = watch
        self.watches = watches
        for shard_id in list(self.revoked_at):
            now_seen = seen.get(shard_id)
            if now_seen is not None and now_seen.checkpoint != self.revoked_at[shard_id]:
                del self.revoked_at[shard_id]  # it moved on: a new episode may revoke again
        if not stuck_after:
            return []
        stuck = []
        for shard_id, what in sorted(seen.items()):
            watch = watches[shard_id]
            if what.failing or watch.waiting_since is None:
                continue
            waited = now - watch.waiting_since
            if waited < stuck_after:
                continue
            revoke = shard_id not in self.revoked_at or self.revoked_at[shard_id] != what.checkpoint
            if revoke:
                self.revoked_at[shard_id] = what.checkpoint
            stuck.append(
                Stuck(
                    shard_id,
                    what.owner,
                    what.epoch,
                    what.checkpoint,
                    waited,
                    revoke=revoke,
                    new=not watch.reported,
                )
            )
            if not watch.reported:
                watches[shard_id] = replace(watch, reported=True)
        return stuck

    def quiet(self, now: float, for_seconds: float) -> list[str]:
        """Watched shards whose position has not moved for `for_seconds` and where no
        records were seen waiting yet: worth a probe of their own."""
        return sorted(
            shard_id
            for shard_id, watch in self.watches.items()
            if watch.waiting_since is None and now - watch.since >= for_seconds
        )

    def records_wait(
        self, shard_id: str, position: tuple[str, int, str | None, str | None], now: float
    ) -> None:
        """A probe from `position` found a record at `now`. Taken only if the shard is
        still at that position (a probe of an older one says nothing of this one)."""
        watch = self.watches.get(shard_id)
        if watch is not None and watch.position == position and watch.waiting_since is None:
            self.watches[shard_id] = replace(watch, waiting_since=now)

    def position(self, shard_id: str) -> tuple[str, int, str | None, str | None] | None:
        watch = self.watches.get(shard_id)
        return None if watch is None else watch.position
