"""What the status, the metrics, the autoscaler and the worker API read of a lease table
without changing it: who owns what, the lag, the blocked shards, the leases as the status
shows them. A base of `LeaseCoordinator`, apart from the protocol that changes the table."""

from __future__ import annotations

from datetime import datetime

from streamconsumer.controller.leases.bounded import Bound
from streamconsumer.controller.leases.start import start_position
from streamconsumer.controller.leases.state import WorkerProgress
from streamconsumer.core.leases import FINISHED, ShardLease, ready_shards
from streamconsumer.core.lineage import Shard
from streamconsumer.models import Lease, StartPosition
from streamconsumer.models.resource import StreamConsumerSpec


class LeaseViews:
    """Reads the coordinator's table: these attributes are the coordinator's."""

    spec: StreamConsumerSpec
    created: datetime
    bound: Bound
    leases: dict[str, ShardLease]
    finished: set[str]
    shards: list[Shard]
    by_id: dict[str, Shard]
    workers: dict[str, WorkerProgress]
    backlog: dict[str, int]
    stream: str | None
    stream_replaced: str | None

    @property
    def end(self) -> datetime | None:
        """A bounded consumer's end (docs/replaying.md); None: it never ends."""
        return self.bound.end

    @property
    def completed(self) -> bool:
        """A bounded consumer read to its end: Complete, for good."""
        return self.bound.completed

    def start_of(self, shard_id: str) -> StartPosition:
        """Where a new owner of the shard would start reading."""
        lease = self.leases.get(shard_id) or ShardLease(shard_id)
        shard = self.by_id.get(shard_id)
        parents = list(shard.parents) if shard else []
        return start_position(self.spec, self.created, lease, parents)

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
                parents=list(self.by_id[shard_id].parents) if shard_id in self.by_id else [],
                state=lease.state,
                handoff_to=lease.handoff_to,
                start=lease.start,
                resetting=lease.resetting,
                millis_behind_latest=lag.get(shard_id) if lease.owner else None,
            )
            for shard_id, lease in sorted(self.leases.items())
        }

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

    def started_shards(self) -> list[Shard]:
        """The shards granted once and not finished: what the engine serves before the
        first listing."""
        return [
            Shard(shard_id)
            for shard_id, lease in sorted(self.leases.items())
            if lease.epoch > 0 and lease.state is not FINISHED
        ]

    def owners(self) -> set[str | None]:
        return {lease.owner for lease in self.leases.values()}
