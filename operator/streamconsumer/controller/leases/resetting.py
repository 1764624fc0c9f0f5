"""A reset applied to a lease table (`streamconsumer reset`, docs/checkpoints.md): the
shards it names start over from its position, an owned one once its owner has handed it
off (the engine does it)."""

from __future__ import annotations

from dataclasses import replace

from streamconsumer.core.leases import FINISHED, ShardLease
from streamconsumer.models.resource import ResetRequest


def reset_leases(
    leases: dict[str, ShardLease], listed: set[str], finished: set[str], request: ResetRequest
) -> list[str]:
    """Marks, in `leases`, the listed and unfinished shards `request` names (every one if
    it names none); returns them."""
    wanted = set(request.shards) if request.shards else listed
    reset = []
    for shard_id in sorted(wanted & listed - finished):
        lease = leases.get(shard_id) or ShardLease(shard_id)
        if lease.state is FINISHED:
            continue
        if lease.owner is None:
            lease = replace(lease, checkpoint=None, start=request.to, resetting=False)
        else:
            lease = replace(lease, start=request.to, resetting=True)
        leases[shard_id] = lease
        reset.append(shard_id)
    return reset
