"""The status rendered from a consumer's lease table: the durable fields, the views, and
one function per condition. Pure: the loop renders it at most once per status interval,
the writer (`status`) writes it (docs/design.md#cheap-on-the-apiserver)."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState, durable_fields
from streamconsumer.controller.names import label_selector
from streamconsumer.controller.workloads.worker_health import WORKERS_NOT_STARTING, WorkerHealth
from streamconsumer.core.leases import ACTIVE, HANDOFF
from streamconsumer.models.resource import Condition, StreamConsumerStatus, WorkerSummary

Reason = tuple[str, str]  # (reason, message)

MAX_LISTED_WORKERS = 50
"""Workers `status.workers` lists each of; past that, only those draining."""


@dataclass(frozen=True)
class Children:
    """How applying the workers' objects went: not yet (`known` false; `failed`, why the
    last attempt failed, if one did: a passing fault, tried again), or its error (a
    refusal: retrying as it is would not help)."""

    known: bool = False
    error: str | None = None
    failed: str | None = None

    def pending(self) -> str:
        return "not applied yet" + (f": {self.failed}" if self.failed else "")


@dataclass(frozen=True)
class Generations:
    """The spec's generation as the object has it now, and the one whose workers run (or
    that got a verdict: refused, workers not starting); None: none known yet. Until they
    agree the consumer is reconciling: kstatus and Argo CD wait on `observedGeneration`."""

    spec: int | None
    observed: int | None

    @property
    def behind(self) -> bool:
        return self.spec is not None and self.observed != self.spec


@dataclass(frozen=True)
class Facts:
    """What the conditions read, gathered once per render."""

    coordinator: LeaseCoordinator
    children: Children
    health: WorkerHealth | None
    problems: list[str]
    paused_by: str | None
    previous: dict[str, Condition]
    generations: Generations
    ready: int  # assignable shards
    owned: int  # of them, with an owner: a planned move (HandOff) is not "unready"
    moving: int  # being handed off
    still_held: int
    workers: dict[str, WorkerSummary]

    @property
    def unassigned(self) -> int:
        return self.ready - self.owned

    @property
    def not_starting(self) -> str | None:
        return self.health.not_starting() if self.health is not None else None

    @property
    def starting(self) -> str | None:
        return self.health.starting() if self.health is not None else None

    @property
    def rolling_out(self) -> str | None:
        return self.health.rolling_out() if self.health is not None else None

    @property
    def scaled_to_zero(self) -> bool:
        """No worker runs, none is wanted (by hand, by an autoscaler): a steady state."""
        return not self.workers and self.health is not None and self.health.scaled_to_zero()

    @property
    def replaced(self) -> str | None:
        return self.coordinator.replaced_stream()

    @property
    def stopped(self) -> bool:
        """Paused, or stopped for a stream created again: no shard is to be owned."""
        return self.coordinator.spec.paused or self.replaced is not None


def _condition(seen: Facts, type_: str, ok: bool | None, reason: str, message: str) -> Condition:
    """`ok` None: Unknown. The transition time moves only when the status does."""
    status = "Unknown" if ok is None else "True" if ok else "False"
    before = seen.previous.get(type_)
    since = (
        before.last_transition_time
        if before is not None and before.status == status
        else datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    )
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=seen.generations.observed,
        last_transition_time=since,
    )


def gather(
    coordinator: LeaseCoordinator,
    generations: Generations,
    previous: list[Condition],
    problems: list[str],
    paused_by: str | None,
    children: Children,
    health: WorkerHealth | None,
) -> Facts:
    leases = coordinator.leases
    ready = coordinator.assignable()
    held = Counter(lease.owner for lease in leases.values() if lease.owner)
    return Facts(
        coordinator=coordinator,
        children=children,
        health=health,
        problems=problems,
        paused_by=paused_by,
        previous={c.type: c for c in previous},
        generations=generations,
        ready=len(ready),
        owned=sum(1 for s in ready if s in leases and leases[s].state in (ACTIVE, HANDOFF)),
        moving=sum(1 for lease in leases.values() if lease.state is HANDOFF),
        still_held=sum(1 for lease in leases.values() if lease.owner),
        workers={
            worker: WorkerSummary(shards=held[worker], draining=progress.draining)
            for worker, progress in sorted(coordinator.workers.items())
        },
    )


def listed_workers(workers: dict[str, WorkerSummary]) -> dict[str, WorkerSummary]:
    """`status.workers`: every worker up to MAX_LISTED_WORKERS, past that those draining
    alone. Every status write rewrites the whole object in etcd, and 500 workers' lines
    (with their managedFields) cost 80 KiB a write; who owns what is in the lease table
    (`streamconsumer status`)."""
    if len(workers) <= MAX_LISTED_WORKERS:
        return workers
    return {name: summary for name, summary in workers.items() if summary.draining}


def _running(seen: Facts) -> str:
    observed = seen.generations.observed
    runs = f"generation {observed}'s workers run" if observed is not None else "no workers run"
    return f"{runs} until its workers' objects are applied and rolled out"


def _first(found: list[str]) -> str:
    return found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")


def stalled(seen: Facts) -> Reason | None:
    """Stalled (kstatus): what needs someone to act, most fundamental first."""
    coordinator = seen.coordinator
    if (replaced := seen.replaced) is not None:
        return ("StreamRecreated", replaced)
    if seen.children.error is not None:
        return ("ChildrenNotApplied", seen.children.error)
    if (not_starting := seen.not_starting) is not None:
        return (WORKERS_NOT_STARTING, not_starting)
    if blocked := coordinator.blocked_shards():
        return ("ShardBlocked", _first(blocked))
    if stuck := coordinator.watch.described():
        return ("ShardStuck", _first(stuck))
    if not coordinator.shards_known and seen.problems and not coordinator.completed:
        return ("StreamUnavailable", seen.problems[0])
    return None


def reconciling(seen: Facts) -> Reason | None:
    """Reconciling (kstatus): work under way."""
    spec = seen.coordinator.spec
    if not seen.children.known:
        return ("ApplyingChildren", f"applying the workers' objects: {seen.children.pending()}")
    if (rolling := seen.rolling_out) is not None:
        return ("RollingOut", rolling)
    if seen.generations.behind:
        return ("ApplyingSpec", f"generation {seen.generations.spec}: {_running(seen)}")
    if not seen.coordinator.shards_known and not seen.coordinator.completed:
        return ("ListingShards", "listing shards")
    if spec.paused and seen.still_held:
        return ("Pausing", f"{seen.still_held} shards still held")
    if seen.moving:
        return ("HandingOff", f"{seen.moving} shards being handed off")
    if (
        seen.unassigned
        and not (seen.stopped or seen.scaled_to_zero)
        and (seen.workers or spec.replicas)
    ):
        return ("ShardsUnassigned", f"{seen.owned}/{seen.ready} assignable shards have an owner")
    if (starting := seen.starting) is not None and not seen.stopped:
        return ("StartingWorkers", starting)
    return None


def said_complete(status: Mapping[str, Any]) -> bool:
    """Whether the stored status says a bounded consumer is Complete: a term taking over
    neither starts its workers again nor tells it again."""
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "Complete" and c.get("status") == "True"
        for c in conditions
    )


def complete(seen: Facts) -> Condition:
    """A bounded consumer's (spec.end): True once every shard is read to the end."""
    if seen.coordinator.completed:
        return _condition(seen, "Complete", True, "EndReached", seen.coordinator.bound.said())
    return _condition(seen, "Complete", False, "Reading", "shards are being read to the end")


def ready(seen: Facts, stuck: Reason | None) -> Condition:
    """`stuck`: what `stalled` says (computed once for both conditions)."""
    if seen.coordinator.completed:  # a steady state: kstatus reads it as Current
        return _condition(seen, "Ready", True, "Complete", seen.coordinator.bound.said())
    if seen.coordinator.spec.paused and seen.replaced is None:  # stopped for good says so first
        if seen.still_held:
            return _condition(
                seen, "Ready", False, "Pausing", f"{seen.still_held} shards still held"
            )
        by = seen.paused_by or "unknown"
        return _condition(
            seen, "Ready", True, "Paused", f"paused by {by}: shards wait at their checkpoints"
        )
    if stuck is not None:
        return _condition(seen, "Ready", False, *stuck)
    if not seen.coordinator.shards_known:
        return _condition(seen, "Ready", False, "ListingShards", "listing shards")
    if seen.scaled_to_zero:
        message = f"scaled to zero: no worker runs; {seen.ready} shards wait at their checkpoints"
        return _condition(seen, "Ready", True, "ScaledToZero", message)
    if seen.unassigned:
        reason = "NoWorkers" if not seen.workers else "ShardsUnassigned"
        message = f"{seen.owned}/{seen.ready} assignable shards have an owner"
        return _condition(seen, "Ready", False, reason, message)
    message = f"{seen.owned} shards owned by {len(seen.workers)} workers"
    return _condition(seen, "Ready", True, "AllShardsOwned", message)


def progressing(seen: Facts) -> Condition:
    moving = seen.moving
    message = f"{moving} shards being handed off" if moving else ""
    return _condition(
        seen, "Progressing", moving > 0, "HandingOff" if moving else "Stable", message
    )


def degraded(seen: Facts) -> Condition:
    problems = seen.problems
    reason = "Unhealthy" if problems else "AsExpected"
    return _condition(seen, "Degraded", bool(problems), reason, "; ".join(problems))


def children_applied(seen: Facts) -> Condition:
    children = seen.children
    if children.error is not None:
        return _condition(seen, "ChildrenApplied", False, "Refused", children.error)
    if children.known:
        return _condition(
            seen, "ChildrenApplied", True, "Applied", "the workers' objects are applied"
        )
    return _condition(seen, "ChildrenApplied", False, "Pending", children.pending())


def workers_available(seen: Facts) -> Condition:
    if seen.health is None:
        message = "the workers' pods and Deployment not observed yet"
        return _condition(seen, "WorkersAvailable", None, "NotObserved", message)
    if (not_starting := seen.not_starting) is not None:
        return _condition(seen, "WorkersAvailable", False, WORKERS_NOT_STARTING, not_starting)
    if (starting := seen.starting) is not None:
        return _condition(seen, "WorkersAvailable", False, "Starting", starting)
    replicas = seen.health.replicas
    counted = (
        f"{replicas.available}/{replicas.desired} worker pods available"
        if replicas is not None
        else "no worker pod failing to start"
    )
    return _condition(seen, "WorkersAvailable", True, "Available", counted)


def conditions(seen: Facts) -> list[Condition]:
    stuck, working = stalled(seen), reconciling(seen)
    return [
        ready(seen, stuck),
        progressing(seen),
        degraded(seen),
        children_applied(seen),
        workers_available(seen),
        _condition(seen, "Reconciling", working is not None, *(working or ("Done", ""))),
        _condition(seen, "Stalled", stuck is not None, *(stuck or ("Progressing", ""))),
        *([complete(seen)] if seen.coordinator.spec.end is not None else []),
    ]


def render(
    name: str,
    coordinator: LeaseCoordinator,
    snapshot: DurableState,
    generations: Generations,
    previous: list[Condition],
    problems: list[str],
    paused_by: str | None = None,
    children: Children | None = None,
    workers_health: WorkerHealth | None = None,
) -> StreamConsumerStatus:
    """`problems`: what keeps the consumer degraded (stream unreachable, status writes
    failing), most important first. `workers_health`: whether the workers' pods start
    (None: not observed yet)."""
    facts = gather(
        coordinator,
        generations,
        previous,
        problems,
        paused_by,
        children or Children(),
        workers_health,
    )
    lag = coordinator.lag_millis()
    return StreamConsumerStatus.model_validate(
        {
            **durable_fields(snapshot),
            "observedGeneration": generations.observed,
            "replicas": sum(1 for w in facts.workers.values() if not w.draining),
            "desiredReplicas": coordinator.desired_replicas,
            "labelSelector": label_selector(name),
            "shards": sum(1 for shard in coordinator.shards if not shard.closed),
            "lagMillis": max(lag.values()) if lag else None,
            "leases": coordinator.status_leases(),
            "pausedBy": paused_by if coordinator.spec.paused else None,
            "workers": listed_workers(facts.workers),
            "conditions": conditions(facts),
        }
    )
