"""The lease engine's invariants (docs/design.md#invariants): single owner, parents first,
balance with the fewest moves, no move when balanced, no grant before release. Property-tested over
random clusters and event sequences, plus DataHub's scenario as an explicit case."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.core.leases import (
    ACTIVE,
    FINISHED,
    HANDOFF,
    RELEASED,
    Action,
    CheckpointDeferred,
    CheckpointRefused,
    EngineSettings,
    Expire,
    Grant,
    Revoke,
    ShardLease,
    WorkerLiveness,
    apply_checkpoint,
    collectable,
    plan,
)
from streamconsumer.core.lineage import SHARD_END, Shard

SETTINGS = EngineSettings()
EXPIRY = 11.0  # a worker heard at t keeps its leases until t + EXPIRY (lease + grace)


def owners(leases: Mapping[str, ShardLease]) -> Counter[str]:
    return Counter(
        lease.owner for lease in leases.values() if lease.owner and lease.state is ACTIVE
    )


def complete_handoffs(leases: Mapping[str, ShardLease]) -> dict[str, ShardLease]:
    """Every owner asked to hand off finishes its batch, checkpoints and releases."""
    out = dict(leases)
    for shard_id, lease in leases.items():
        if lease.state is HANDOFF:
            assert lease.owner is not None
            out[shard_id] = apply_checkpoint(
                lease, lease.owner, lease.epoch, lease.checkpoint or "1", release=True
            )
    return out


def settle(
    shards: list[Shard],
    leases: Mapping[str, ShardLease],
    workers: list[WorkerLiveness],
    now: float = 0.0,
    engine: EngineSettings = SETTINGS,
) -> dict[str, ShardLease]:
    """Runs the engine, completing hand-offs, until it has nothing left to do."""
    current = dict(leases)
    for _ in range(10):
        step = plan(shards, current, workers, now, engine)
        check_step(current, step.leases, step.actions, shards)
        current = complete_handoffs(step.leases)
        if not step.actions and current == step.leases:
            return current
    raise AssertionError("the engine did not settle")


def check_step(
    before: Mapping[str, ShardLease],
    after: Mapping[str, ShardLease],
    actions: list[Action],
    shards: list[Shard],
) -> None:
    """Invariants of a single engine step."""
    finished = {s for s, lease in after.items() if lease.checkpoint == SHARD_END}
    listed = {shard.id for shard in shards}
    expired = {a.worker for a in actions if isinstance(a, Expire)}
    for shard_id, lease in after.items():
        old = before.get(shard_id)
        # Single owner: a live owner is never replaced by another worker in one step.
        if old is not None and old.owner and lease.owner and old.owner not in expired:
            assert old.owner == lease.owner, f"{shard_id}: {old.owner} -> {lease.owner}"
        # Epochs never go back.
        assert lease.epoch >= (old.epoch if old else 0)
    for action in actions:
        if isinstance(action, Grant):
            old = before.get(action.shard_id)
            # No grant before release: nobody held the shard, or its owner just expired.
            assert old is None or old.owner is None or old.owner in expired, (action, old)
            assert after[action.shard_id].epoch == (old.epoch if old else 0) + 1
    # Parents first: a shard starts only once its parents are finished or gone from the
    # stream (after that, its parents' leases may be collected).
    by_id = {shard.id: shard for shard in shards}
    for shard_id, lease in after.items():
        old = before.get(shard_id)
        first_start = lease.epoch > 0 and (old is None or old.epoch == 0)
        if first_start and shard_id in by_id:
            for parent in by_id[shard_id].parents:
                assert parent not in listed or parent in finished, f"{shard_id} before {parent}"


def assert_balanced(
    leases: Mapping[str, ShardLease], assignable: int, workers: list[str], cap: int | None = None
) -> None:
    counts = owners(leases)
    low, high = divmod(assignable, len(workers))
    high = low + (1 if high else 0)
    if cap is not None:
        low, high = min(low, cap), min(high, cap)
    for worker in workers:
        assert low <= counts[worker] <= high, (worker, dict(counts))


def live(*names: str, now: float = 0.0) -> list[WorkerLiveness]:
    return [WorkerLiveness(name, expires_at=now + EXPIRY) for name in names]


def flat(count: int) -> list[Shard]:
    return [Shard(f"shard-{i:03d}") for i in range(count)]


def test_datahub_scenario() -> None:
    shards = flat(10)
    leases = settle(shards, {}, live("A"))
    assert owners(leases) == {"A": 10}

    leases = settle(shards, leases, live("A", "B", "C"))
    assert sorted(owners(leases).values(), reverse=True) == [4, 3, 3]
    assert owners(leases)["A"] == 4, "A keeps the most: the fewest moves"

    # One of A's shards splits; A reads it to the end and checkpoints SHARD_END.
    parent = sorted(s for s, lease in leases.items() if lease.owner == "A")[0]
    lease = leases[parent]
    leases[parent] = apply_checkpoint(lease, "A", lease.epoch, SHARD_END, shard_closed=True)
    children = [Shard(f"{parent}-a", (parent,)), Shard(f"{parent}-b", (parent,))]
    shards = [replace(s, closed=True) if s.id == parent else s for s in shards] + children
    leases = settle(shards, leases, live("A", "B", "C"))
    assert sorted(owners(leases).values(), reverse=True) == [4, 4, 3]

    c_leaves = [*live("A", "B"), WorkerLiveness("C", EXPIRY, draining=True)]
    leases = settle(shards, leases, c_leaves)
    assert sorted(owners(leases).values(), reverse=True) == [6, 5]


def test_children_wait_for_every_parent_of_a_merge() -> None:
    shards = [
        Shard("p1", closed=True),
        Shard("p2", closed=True),
        Shard("child", parents=("p1", "p2")),
    ]
    leases = settle(shards, {}, live("A", "B"))
    assert leases.get("child") is None or leases["child"].owner is None
    first = leases["p1"]
    assert first.owner is not None
    leases["p1"] = apply_checkpoint(first, first.owner, first.epoch, SHARD_END, shard_closed=True)
    leases = settle(shards, leases, live("A", "B"))
    assert leases.get("child") is None or leases["child"].owner is None, "second parent not done"
    second = leases["p2"]
    assert second.owner is not None
    leases["p2"] = apply_checkpoint(
        second, second.owner, second.epoch, SHARD_END, shard_closed=True
    )
    leases = settle(shards, leases, live("A", "B"))
    assert leases["child"].owner in {"A", "B"}


def test_silent_worker_expires_only_after_duration_plus_grace() -> None:
    shards = flat(4)
    leases = settle(shards, {}, live("A", "B"))
    workers = [WorkerLiveness("A", expires_at=EXPIRY), WorkerLiveness("B", expires_at=2 * EXPIRY)]
    at_limit = plan(shards, leases, workers, 11.0, SETTINGS)
    assert not any(isinstance(a, Expire) for a in at_limit.actions)
    step = plan(shards, leases, workers, 11.01, SETTINGS)
    expired = [a for a in step.actions if isinstance(a, Expire)]
    assert [a.worker for a in expired] == ["A"]
    assert owners(step.leases) == {"B": 4}, "A's shards are granted at once to B"
    assert all(step.leases[s].epoch == leases[s].epoch + 1 for s in expired[0].shard_ids), (
        "a fresh epoch fences A out"
    )


def test_draining_worker_hands_off_everything() -> None:
    shards = flat(6)
    leases = settle(shards, {}, live("A", "B"))
    workers = [WorkerLiveness("A", EXPIRY, draining=True), WorkerLiveness("B", EXPIRY)]
    step = plan(shards, leases, workers, 0.0, SETTINGS)
    revoked = {a.shard_id for a in step.actions if isinstance(a, Revoke)}
    assert revoked == {s for s, lease in leases.items() if lease.owner == "A"}
    assert not any(isinstance(a, Grant) for a in step.actions), "no grant before release"
    assert owners(settle(shards, step.leases, workers)) == {"B": 6}


def test_scale_to_zero_releases_with_checkpoints_kept() -> None:
    shards = flat(3)
    leases = settle(shards, {}, live("A"))
    leases = {s: replace(lease, checkpoint="42") for s, lease in leases.items()}
    draining = [WorkerLiveness("A", EXPIRY, draining=True)]
    leases = settle(shards, leases, draining)
    assert all(lease.state is RELEASED and lease.checkpoint == "42" for lease in leases.values())
    leases = settle(shards, leases, live("B"))
    assert owners(leases) == {"B": 3}


def test_max_per_worker_caps_assignment() -> None:
    engine = EngineSettings(max_per_worker=2)
    leases = settle(flat(7), {}, live("A", "B"), engine=engine)
    assert owners(leases) == {"A": 2, "B": 2}


def test_checkpoints_are_fenced_and_forward_only() -> None:
    lease = ShardLease("s", owner="A", epoch=3, checkpoint="100", state=ACTIVE)
    assert apply_checkpoint(lease, "A", 3, "150").checkpoint == "150"
    with pytest.raises(CheckpointRefused) as stale:
        apply_checkpoint(lease, "A", 2, "150")
    assert stale.value.lease_lost
    with pytest.raises(CheckpointRefused) as other:
        apply_checkpoint(lease, "B", 3, "150")
    assert other.value.lease_lost
    with pytest.raises(CheckpointRefused) as backwards:
        apply_checkpoint(lease, "A", 3, "99")
    assert not backwards.value.lease_lost
    finished = apply_checkpoint(lease, "A", 3, SHARD_END, shard_closed=True)
    assert finished.state is FINISHED
    assert finished.owner is None
    # Sequence numbers are compared as integers: "100" follows "99".
    at_99 = replace(lease, checkpoint="99")
    assert apply_checkpoint(at_99, "A", 3, "100").checkpoint == "100"


# --- properties -------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Shard], list[str]]:
    count = draw(st.integers(1, 30))
    shards = flat(count)
    # Some shards were split or merged: closed parents with open children.
    for index in draw(st.lists(st.integers(0, count - 1), unique=True, max_size=5)):
        parent = shards[index]
        shards[index] = replace(parent, closed=True)
        shards.append(Shard(f"{parent.id}-child", (parent.id,)))
    workers = [f"w{i}" for i in range(draw(st.integers(1, 8)))]
    return shards, workers


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_fresh_assignment_is_balanced_and_respects_lineage(
    cluster: tuple[list[Shard], list[str]],
) -> None:
    shards, workers = cluster
    leases = settle(shards, {}, live(*workers))
    assignable = [s for s in shards if not s.parents]
    assert_balanced(leases, len(assignable), workers)
    again = plan(shards, leases, live(*workers), 0.0, SETTINGS)
    assert again.actions == [], "no move when balanced"


def minimal_moves(holdings: list[int], shard_count: int) -> int:
    """How many held shards must change worker to reach ⌊S/W⌋..⌈S/W⌉ (computed
    independently of the engine: each worker keeps at most its target)."""
    base, extra = divmod(shard_count, len(holdings))
    kept = sum(min(h, base) for h in holdings) + min(extra, sum(1 for h in holdings if h > base))
    return sum(holdings) - kept


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(1, 4), st.integers(0, 3))
def test_join_and_leave_move_the_fewest_shards(
    cluster: tuple[list[Shard], list[str]], joining: int, leaving: int
) -> None:
    shards, workers = cluster
    leases = settle(shards, {}, live(*workers))
    assignable = sum(1 for s in shards if not s.parents)

    grown = workers + [f"new{i}" for i in range(joining)]
    step = plan(shards, leases, live(*grown), 0.0, SETTINGS)
    holdings = [owners(leases)[w] for w in grown]
    assert sum(isinstance(a, Revoke) for a in step.actions) == minimal_moves(holdings, assignable)
    leases = settle(shards, step.leases, live(*grown))
    assert_balanced(leases, assignable, grown)

    remaining = grown[: max(1, len(grown) - leaving)]
    leaving_set = set(grown) - set(remaining)
    draining = live(*remaining) + [WorkerLiveness(w, EXPIRY, draining=True) for w in leaving_set]
    step = plan(shards, leases, draining, 0.0, SETTINGS)
    moved = {a.shard_id for a in step.actions if isinstance(a, Revoke)}
    held_by_leavers = {s for s, lease in leases.items() if lease.owner in leaving_set}
    holdings = [owners(leases)[w] for w in remaining]
    assert held_by_leavers <= moved
    assert len(moved - held_by_leavers) == minimal_moves(holdings, assignable)
    leases = settle(shards, step.leases, draining)
    assert_balanced(leases, assignable, remaining)


events = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 9)),
        st.tuples(st.just("drain"), st.integers(0, 9)),
        st.tuples(st.just("silence"), st.integers(0, 9)),
        st.tuples(st.just("finish"), st.integers(0, 40)),
        st.tuples(st.just("handoffs"), st.just(0)),
        st.tuples(st.just("collect"), st.just(0)),
        st.tuples(st.just("tick"), st.integers(1, 15)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(clusters(), events)
def test_random_histories_keep_every_invariant(
    cluster: tuple[list[Shard], list[str]], history: list[tuple[str, int]]
) -> None:
    shards, initial = cluster
    now = 0.0
    heard = {w: now for w in initial}
    draining: set[str] = set()
    silent: set[str] = set()
    leases: dict[str, ShardLease] = {}
    ever_finished: set[str] = set()
    for kind, arg in history:
        name = f"w{arg}"
        if kind == "join":
            heard[name] = now
            draining.discard(name)
            silent.discard(name)
        elif kind == "drain" and name in heard:
            draining.add(name)
        elif kind == "silence" and name in heard:
            silent.add(name)
        elif kind == "finish":
            # The owner of some held shard reaches its end and checkpoints SHARD_END.
            held = sorted(s for s, lease in leases.items() if lease.owner and lease.state is ACTIVE)
            if held:
                shard_id = held[arg % len(held)]
                lease = leases[shard_id]
                assert lease.owner is not None
                leases[shard_id] = apply_checkpoint(
                    lease, lease.owner, lease.epoch, SHARD_END, shard_closed=True
                )
                ever_finished.add(shard_id)
        elif kind == "collect":
            for shard_id in collectable(shards, leases):
                del leases[shard_id]
        elif kind == "handoffs":
            leases = complete_handoffs(leases)
        elif kind == "tick":
            now += arg
        for worker in heard:
            if worker not in silent:
                heard[worker] = now
        workers = [WorkerLiveness(w, t + EXPIRY, draining=w in draining) for w, t in heard.items()]
        step = plan(shards, leases, workers, now, SETTINGS)
        check_step(leases, step.leases, step.actions, shards)
        for action in step.actions:
            if isinstance(action, Grant):
                assert action.worker not in draining
                assert now - heard[action.worker] <= EXPIRY
                assert action.shard_id not in ever_finished, "a finished shard never restarts"
        leases = step.leases


def test_finished_parents_leave_status_once_children_started() -> None:
    shards = [Shard("p", closed=True), Shard("c1", ("p",)), Shard("c2", ("p",))]
    leases = settle(shards, {}, live("A"))
    assert collectable(shards, leases) == []
    parent = leases["p"]
    leases["p"] = apply_checkpoint(parent, "A", parent.epoch, SHARD_END, shard_closed=True)
    assert collectable(shards, leases) == [], "children have not started yet"
    leases = settle(shards, leases, live("A"))
    assert collectable(shards, leases) == ["p"]
    del leases["p"]
    # Without the parent's lease, the engine neither restarts the parent nor blocks the
    # children: a worker change moves them as usual.
    leases = settle(shards, leases, live("B"))
    assert "p" not in leases
    assert owners(leases) == {"B": 2}


def test_shard_end_only_ends_a_shard_the_listing_shows_closed() -> None:
    """Issue 22.12: a finished shard is never granted again, so a SHARD_END on an open
    shard would skip every record left in it. Fencing is judged first."""
    lease = ShardLease("s", owner="A", epoch=3, checkpoint="100", state=ACTIVE)
    with pytest.raises(CheckpointRefused) as open_shard:
        apply_checkpoint(lease, "A", 3, SHARD_END, shard_closed=False)
    assert not open_shard.value.lease_lost
    with pytest.raises(CheckpointDeferred):
        apply_checkpoint(lease, "A", 3, SHARD_END, shard_closed=None)
    with pytest.raises(CheckpointRefused) as fenced:
        apply_checkpoint(lease, "B", 3, SHARD_END, shard_closed=False)
    assert fenced.value.lease_lost, "not its lease: 409 whatever the listing says"
    assert apply_checkpoint(lease, "A", 3, "150", shard_closed=False).checkpoint == "150"
    finished = apply_checkpoint(lease, "A", 3, SHARD_END, shard_closed=True)
    assert apply_checkpoint(finished, "A", 3, SHARD_END, shard_closed=None) == finished, (
        "a repeated SHARD_END is taken as it was, listing or not"
    )
