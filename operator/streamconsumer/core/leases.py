"""The lease engine: from shards, leases and worker liveness, the next leases and the
actions that get there. Pure and deterministic — time is an argument, nothing is read or
written — so the invariants (docs/design.md#invariants) can be property-tested and benchmarked.

A lease moves through these states (`LeaseState`):

    Released --grant (epoch+1)--> Active --revoke--> HandOff --owner releases--> Released
        ^                           |                                       |
        +------- owner expires -----+---------------------------------------+
    Active --checkpoint SHARD_END--> Finished    (only once the listing shows it closed)
    Active --withdrawn (stuck), owner's fence closed--> Released

A shard is only ever granted from Released, so it never has two owners; a planned move
waits for the old owner to finish its batch, checkpoint and release (hand-off). A
withdrawn lease (the stuck-shard watchdog, `core.watchdog`) is released without its
owner's word, as an expired one is, but only once the owner's fence for it has closed: a
wedged owner that wakes up later can then neither deliver nor checkpoint
(docs/design.md#self-fencing)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from streamconsumer.core.lineage import SHARD_END, Shard, assignable_shards
from streamconsumer.models.resource import LeaseState, ResetPosition

ACTIVE, HANDOFF, RELEASED, FINISHED = (
    LeaseState.ACTIVE,
    LeaseState.HANDOFF,
    LeaseState.RELEASED,
    LeaseState.FINISHED,
)


@dataclass(frozen=True, slots=True)
class ShardLease:
    shard_id: str
    owner: str | None = None
    epoch: int = 0
    checkpoint: str | None = None
    state: LeaseState = RELEASED
    handoff_to: str | None = None  # the planned next owner during (or right after) a hand-off
    start: ResetPosition | None = None  # where a grant starts without a checkpoint (a reset)
    resetting: bool = False  # a reset waits for the owner to hand the shard off


@dataclass(frozen=True, slots=True)
class WorkerLiveness:
    """What the operator knows of a worker: until when, on the operator's own monotonic
    clock, the worker may still hold its leases (its fence plus a grace, see
    docs/design.md#self-fencing), and whether it is draining (shutting down)."""

    name: str
    expires_at: float
    draining: bool = False


@dataclass(frozen=True, slots=True)
class EngineSettings:
    max_per_worker: int | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    shard_id: str
    worker: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Revoke:
    """Ask `worker` to hand `shard_id` off (finish the batch, checkpoint, release)."""

    shard_id: str
    worker: str
    to: str | None


@dataclass(frozen=True, slots=True)
class CancelHandoff:
    shard_id: str
    worker: str


@dataclass(frozen=True, slots=True)
class Expire:
    """`worker` went silent; its shards are released at their last checkpoint."""

    worker: str
    shard_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """A lease taken from its live owner (a stuck shard): the owner is told it lost the
    shard and its fence for it is renewed no more, so the fence has closed by
    `closes_at` (operator clock: the longest promise made to the owner, plus the grace,
    as of the withdrawal). Until then the lease stays the owner's and nothing moves it."""

    worker: str
    epoch: int
    closes_at: float


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A withdrawn lease is released: its owner's fence for it has closed."""

    shard_id: str
    worker: str
    epoch: int


Action = Grant | Revoke | CancelHandoff | Expire | Reclaim


@dataclass(slots=True)
class Plan:
    leases: dict[str, ShardLease]
    actions: list[Action] = field(default_factory=list)


def plan(
    shards: Sequence[Shard],
    leases: Mapping[str, ShardLease],
    workers: Iterable[WorkerLiveness],
    now: float,
    settings: EngineSettings,
    finished: Collection[str] = frozenset(),
    withdrawn: Mapping[str, Withdrawn] = {},
) -> Plan:
    """One step of the engine: expire silent workers and release withdrawn leases whose
    owner's fence has closed, then balance the assignable shards over the live,
    non-draining workers with the fewest moves. `finished` holds the shards known
    finished whose leases have left the table; `withdrawn`, the leases taken from their
    owner (stuck shards)."""
    result = Plan(leases=dict(leases))
    alive = {w.name for w in workers if now <= w.expires_at}
    draining = {w.name for w in workers if w.draining}
    receivers = sorted(alive - draining)

    _expire_silent_owners(result, alive)
    waiting = _reclaim_withdrawn(result, withdrawn, now)
    _carry_out_resets(result)
    ready = [
        shard_id
        for shard_id in ready_shards(shards, result.leases, finished)
        if not (shard_id in result.leases and result.leases[shard_id].resetting)
    ]
    holders = _current_holders(ready, result.leases, set(receivers))
    targets = _balanced_targets(len(ready), receivers, holders, settings.max_per_worker)
    new_holders = _rebalance(ready, holders, targets, result.leases)
    _apply(result, [s for s in ready if s not in waiting], new_holders)
    return result


def ready_shards(
    shards: Sequence[Shard], leases: Mapping[str, ShardLease], finished: Collection[str] = ()
) -> list[str]:
    """The shards that may be held now, given the lease table (see assignable_shards)."""
    return assignable_shards(shards, finished_shards(shards, leases, finished))


def finished_shards(
    shards: Sequence[Shard], leases: Mapping[str, ShardLease], finished: Collection[str] = ()
) -> set[str]:
    """Every shard known to be finished: checkpointed at SHARD_END, in the finished set,
    or a parent of a shard that has started (a child is only ever granted once its
    parents are finished; this also reads lineage from statuses that predate the set)."""
    done = set(finished)
    done.update(sid for sid, lease in leases.items() if lease.checkpoint == SHARD_END)
    for shard in shards:
        lease = leases.get(shard.id)
        if shard.parents and lease is not None and lease.epoch > 0:
            done.update(shard.parents)
    return done


def _expire_silent_owners(result: Plan, alive: set[str]) -> None:
    expired: dict[str, list[str]] = {}
    for shard_id, lease in result.leases.items():
        if lease.owner is not None and lease.owner not in alive:
            expired.setdefault(lease.owner, []).append(shard_id)
            result.leases[shard_id] = replace(lease, owner=None, state=RELEASED, handoff_to=None)
    for worker in sorted(expired):
        result.actions.append(Expire(worker, tuple(sorted(expired[worker]))))


def _reclaim_withdrawn(result: Plan, withdrawn: Mapping[str, Withdrawn], now: float) -> set[str]:
    """Releases the withdrawn leases whose owner's fence has closed; returns those still
    waiting for it (left as they are: no hand-off, grant or cancel touches them)."""
    waiting = set()
    for shard_id, taken in sorted(withdrawn.items()):
        lease = result.leases.get(shard_id)
        if lease is None or lease.owner != taken.worker or lease.epoch != taken.epoch:
            continue  # it moved on already (expired, released, finished)
        if now <= taken.closes_at:
            waiting.add(shard_id)
            continue
        result.leases[shard_id] = replace(lease, owner=None, state=RELEASED, handoff_to=None)
        result.actions.append(Reclaim(shard_id, taken.worker, taken.epoch))
    return waiting


def _carry_out_resets(result: Plan) -> None:
    """A reset is a hand-off to nobody: the owner finishes its batch and releases (or
    expires); only then does the lease forget its checkpoint for the reset's position, so
    the next owner, under a new epoch, never overlaps the last one."""
    for shard_id, lease in result.leases.items():
        if not lease.resetting:
            continue
        if lease.state is ACTIVE:
            assert lease.owner is not None
            result.leases[shard_id] = replace(lease, state=HANDOFF, handoff_to=None)
            result.actions.append(Revoke(shard_id, lease.owner, None))
        elif lease.state is HANDOFF and lease.handoff_to is not None:
            result.leases[shard_id] = replace(lease, handoff_to=None)
        elif lease.state is RELEASED:
            result.leases[shard_id] = replace(lease, checkpoint=None, resetting=False)


def _current_holders(
    ready: list[str], leases: Mapping[str, ShardLease], receivers: set[str]
) -> dict[str, str | None]:
    """Who each shard counts for when balancing: its owner, or where it is already
    heading (a hand-off or a release aimed at a worker); None if nobody live has it."""
    holders: dict[str, str | None] = {}
    for shard_id in ready:
        lease = leases.get(shard_id)
        holder = None
        if lease is not None:
            if lease.handoff_to in receivers:
                holder = lease.handoff_to
            elif lease.state in (ACTIVE, HANDOFF) and lease.owner in receivers:
                holder = lease.owner
        holders[shard_id] = holder
    return holders


def _balanced_targets(
    shard_count: int,
    receivers: list[str],
    holders: Mapping[str, str | None],
    max_per_worker: int | None,
) -> dict[str, int]:
    """⌊S/W⌋ or ⌈S/W⌉ shards per worker (capped by max_per_worker); the ⌈S/W⌉ slots go
    to the workers holding the most already, which is what keeps moves to a minimum."""
    if not receivers:
        return {}
    counts = dict.fromkeys(receivers, 0)
    for holder in holders.values():
        if holder is not None:
            counts[holder] += 1
    base, extra = divmod(shard_count, len(receivers))
    by_holdings = sorted(receivers, key=lambda w: (-counts[w], w))
    targets = {w: base + (1 if rank < extra else 0) for rank, w in enumerate(by_holdings)}
    if max_per_worker is not None:
        targets = {w: min(t, max_per_worker) for w, t in targets.items()}
    return targets


def _rebalance(
    ready: list[str],
    holders: Mapping[str, str | None],
    targets: Mapping[str, int],
    leases: Mapping[str, ShardLease],
) -> dict[str, str | None]:
    held: dict[str, list[str]] = {w: [] for w in targets}
    pool: list[str] = []
    for shard_id in ready:
        holder = holders[shard_id]
        if holder is None:
            pool.append(shard_id)
        else:
            held[holder].append(shard_id)

    new_holders: dict[str, str | None] = dict(holders)
    surplus: list[str] = []
    for worker, shard_ids in held.items():
        keep = targets[worker]
        if len(shard_ids) > keep:
            # Keep the shards the worker really owns; give up those still in transit to it.
            def in_transit(shard_id: str, worker: str = worker) -> bool:
                lease = leases.get(shard_id)
                return lease is None or lease.owner != worker or lease.state is not ACTIVE

            shard_ids.sort(key=lambda s: (in_transit(s), s))
            surplus.extend(shard_ids[keep:])
            del shard_ids[keep:]
    for shard_id in surplus:
        new_holders[shard_id] = None
    pool = surplus + pool

    position = 0
    for worker in sorted(targets):
        for _ in range(targets[worker] - len(held[worker])):
            if position == len(pool):
                return new_holders
            new_holders[pool[position]] = worker
            position += 1
    return new_holders


def _apply(result: Plan, ready: list[str], new_holders: Mapping[str, str | None]) -> None:
    leases, actions = result.leases, result.actions
    for shard_id in ready:
        lease = leases.get(shard_id) or ShardLease(shard_id)
        target = new_holders.get(shard_id)
        if lease.state is ACTIVE:
            if lease.owner != target:
                assert lease.owner is not None
                leases[shard_id] = replace(lease, state=HANDOFF, handoff_to=target)
                actions.append(Revoke(shard_id, lease.owner, target))
        elif lease.state is HANDOFF:
            assert lease.owner is not None
            if target == lease.owner:
                leases[shard_id] = replace(lease, state=ACTIVE, handoff_to=None)
                actions.append(CancelHandoff(shard_id, lease.owner))
            elif target != lease.handoff_to:
                leases[shard_id] = replace(lease, handoff_to=target)
        elif lease.state is RELEASED:
            if target is not None:
                epoch = lease.epoch + 1
                # Built directly, not with replace(): this is the hot path of a fresh start.
                leases[shard_id] = ShardLease(
                    shard_id, target, epoch, lease.checkpoint, ACTIVE, None, lease.start
                )
                actions.append(Grant(shard_id, target, epoch))
            elif lease.handoff_to is not None:
                leases[shard_id] = replace(lease, handoff_to=None)


class CheckpointRefused(Exception):
    """A checkpoint the lease table cannot take; `lease_lost` tells fencing from bad input."""

    def __init__(self, message: str, *, lease_lost: bool) -> None:
        super().__init__(message)
        self.lease_lost = lease_lost


class CheckpointDeferred(Exception):
    """A checkpoint that cannot be judged yet: ask again soon (a SHARD_END before the
    operator has listed the stream since it started)."""


def apply_checkpoint(
    lease: ShardLease | None,
    worker: str,
    epoch: int,
    sequence_number: str | None,
    release: bool = False,
    *,
    shard_closed: bool | None = None,
) -> ShardLease:
    """The lease after `worker` checkpoints `sequence_number` (or SHARD_END) under `epoch`;
    `release` gives the lease up (with or without a new position). `shard_closed` is what
    the stream's listing says of the shard (None: not listed yet).

    Refused if the worker does not hold the lease under that epoch (fencing), if the
    checkpoint would go backwards, or if it is SHARD_END while the listing shows the
    shard open: a finished shard is never granted again, so a wrong SHARD_END would skip
    every record left in it (docs/design.md#one-bad-client-hurts-only-itself). Deferred
    (CheckpointDeferred) if it is SHARD_END and the shard is not listed yet. A release
    or SHARD_END repeated after it took effect (its answer was lost, or the worker waits
    for it to be saved) is accepted as is."""
    if lease is None:
        raise CheckpointRefused("unknown shard", lease_lost=False)
    if _repeats(lease, epoch, sequence_number, release):
        return lease
    if lease.owner != worker or lease.epoch != epoch or lease.state not in (ACTIVE, HANDOFF):
        raise CheckpointRefused(
            f"{worker} does not hold {lease.shard_id} at epoch {epoch} "
            f"(owner {lease.owner}, epoch {lease.epoch})",
            lease_lost=True,
        )
    if lease.checkpoint == SHARD_END:
        raise CheckpointRefused("the shard is already finished", lease_lost=False)
    if sequence_number is None:
        if not release:
            raise CheckpointRefused("nothing to checkpoint", lease_lost=False)
        return replace(lease, owner=None, state=RELEASED)
    if (
        sequence_number != SHARD_END
        and lease.checkpoint is not None
        and int(sequence_number) < int(lease.checkpoint)
    ):
        raise CheckpointRefused(
            f"checkpoint {sequence_number} is behind {lease.checkpoint}", lease_lost=False
        )
    if sequence_number == SHARD_END:
        if shard_closed is None:
            raise CheckpointDeferred(
                f"{lease.shard_id}: no listing newer than this SHARD_END shows the shard "
                "closed yet; one is on its way (retry)"
            )
        if not shard_closed:
            raise CheckpointRefused(
                f"{lease.shard_id} is open as the stream lists it: SHARD_END is taken only "
                "for a closed shard (a listing older than a reshard is refreshed within "
                "the shard sync period)",
                lease_lost=False,
            )
        return replace(lease, checkpoint=SHARD_END, owner=None, state=FINISHED, handoff_to=None)
    start = lease.start if lease.resetting else None  # a checkpoint outranks a reset's start
    if release:
        return replace(lease, checkpoint=sequence_number, owner=None, state=RELEASED, start=start)
    return replace(lease, checkpoint=sequence_number, start=start)


def _repeats(lease: ShardLease, epoch: int, sequence_number: str | None, release: bool) -> bool:
    """A release or finish that already took effect under this epoch."""
    if lease.owner is not None or lease.epoch != epoch:
        return False
    if sequence_number == SHARD_END:
        return lease.state is FINISHED
    return release and lease.state is RELEASED and sequence_number in (None, lease.checkpoint)


def collectable(shards: Sequence[Shard], leases: Mapping[str, ShardLease]) -> list[str]:
    """Finished leases that may leave the status: every child has started (lineage then
    knows the parent is done from the child), or the shard is gone from the stream."""
    listed = {shard.id for shard in shards}
    children: dict[str, list[str]] = {}
    for shard in shards:
        for parent in shard.parents:
            children.setdefault(parent, []).append(shard.id)
    out = []
    for shard_id, lease in leases.items():
        if lease.state is not FINISHED:
            continue
        kids = children.get(shard_id, [])
        started = bool(kids) and all(k in leases and leases[k].epoch > 0 for k in kids)
        if shard_id not in listed or started:
            out.append(shard_id)
    return out
