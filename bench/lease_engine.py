"""Lease engine at scale: 10,000 shards over 500 workers — a fresh assignment, one worker
joining, one leaving — timed against a baseline in the same run (building the lease table
once, which any step of the engine has to do at least). Target: < 50 ms per step."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable

from bench.results import record
from streamconsumer.core.leases import (
    ACTIVE,
    EngineSettings,
    Plan,
    Revoke,
    ShardLease,
    WorkerLiveness,
    apply_checkpoint,
    plan,
)
from streamconsumer.core.lineage import Shard

SHARDS, WORKERS, REPEAT = 10_000, 500, 7
SETTINGS = EngineSettings()


def timed(step: Callable[[], Plan]) -> tuple[float, Plan]:
    """Median milliseconds of `step` over REPEAT runs, and its result."""
    samples, result = [], None
    for _ in range(REPEAT):
        started = time.perf_counter()
        result = step()
        samples.append((time.perf_counter() - started) * 1000)
    assert result is not None
    return statistics.median(samples), result


def settle(result: Plan, workers: list[WorkerLiveness]) -> dict[str, ShardLease]:
    """Completes every hand-off the step asked for (owners checkpoint and release)."""
    leases = dict(result.leases)
    for action in result.actions:
        if isinstance(action, Revoke):
            lease = leases[action.shard_id]
            assert lease.owner is not None
            leases[action.shard_id] = apply_checkpoint(
                lease, lease.owner, lease.epoch, "1", release=True
            )
    return plan(shards, leases, workers, 0.0, SETTINGS).leases


def minimal_moves(counts: list[int], total: int) -> int:
    base, extra = divmod(total, len(counts))
    kept = sum(min(c, base) for c in counts) + min(extra, sum(1 for c in counts if c > base))
    return sum(counts) - kept


shards = [Shard(f"shardId-{i:012d}") for i in range(SHARDS)]
names = [f"worker-{i:03d}" for i in range(WORKERS)]
everyone = [WorkerLiveness(n, expires_at=1.0) for n in names]  # alive at 0


def main() -> None:
    baseline_ms, _ = timed(
        lambda: Plan({s.id: ShardLease(s.id, owner=names[0], state=ACTIVE) for s in shards})
    )
    assign_ms, fresh = timed(lambda: plan(shards, {}, everyone, 0.0, SETTINGS))
    leases = fresh.leases

    joined = [*everyone, WorkerLiveness("worker-new", expires_at=1.0)]
    join_ms, join = timed(lambda: plan(shards, leases, joined, 0.0, SETTINGS))
    counts = Counter(lease.owner for lease in leases.values())
    join_moves = sum(isinstance(a, Revoke) for a in join.actions)
    join_excess = join_moves - minimal_moves([counts[w.name] for w in joined], SHARDS)
    leases = settle(join, joined)

    leaving = [*joined[1:], WorkerLiveness(joined[0].name, expires_at=1.0, draining=True)]
    leave_ms, leave = timed(lambda: plan(shards, leases, leaving, 0.0, SETTINGS))
    counts = Counter(lease.owner for lease in leases.values())
    leave_moves = sum(isinstance(a, Revoke) for a in leave.actions)
    needed = counts[joined[0].name] + minimal_moves([counts[w.name] for w in joined[1:]], SHARDS)
    leave_excess = leave_moves - needed

    print(f"lease engine, {SHARDS} shards x {WORKERS} workers (median of {REPEAT}):")
    print(f"  baseline (build the lease table)  {baseline_ms:7.1f} ms")
    for label, ms in (
        ("fresh assignment", assign_ms),
        ("one worker joins", join_ms),
        ("one worker leaves", leave_ms),
    ):
        print(f"  {label:<33} {ms:7.1f} ms  ({ms / baseline_ms:4.1f}x baseline)")
    print(
        f"  moves on join: {join_moves} (excess over minimum: {join_excess}); "
        f"on leave: {leave_moves} (excess: {leave_excess})"
    )
    record(
        {
            "lease_engine_assign_ms": round(assign_ms, 2),
            "lease_engine_join_ms": round(join_ms, 2),
            "lease_engine_leave_ms": round(leave_ms, 2),
            "lease_engine_baseline_ms": round(baseline_ms, 2),
            "lease_engine_excess_moves": join_excess + leave_excess,
        }
    )


if __name__ == "__main__":
    main()
