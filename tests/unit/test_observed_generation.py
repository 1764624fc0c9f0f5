"""observedGeneration and the conditions mean "applied and rolled out" (issue 42): Flux
(kstatus) and Argo CD called a new spec done while generation 1's workers still ran it,
a rollout with maxUnavailable 0 never showed, and a consumer scaled to zero stayed in
progress for ever."""

from __future__ import annotations

from typing import Any, cast

import pytest

from streamconsumer.controller.consumer.driver import load
from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.leases.status import StatusApi, StatusWriter
from streamconsumer.controller.workloads.worker_health import (
    DEPLOYMENT_CHECK_SECONDS,
    ROLLOUT_CHECK_SECONDS,
    Replicas,
    Trouble,
    deployment_replicas,
    rollout,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models import HeartbeatRequest

from .test_consumer_loop import make_loop, reasons


def deployment(generation: int = 2, observed: int = 2, **status: int) -> dict[str, Any]:
    counts = {"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, **status}
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": observed, **counts},
    }


@pytest.mark.parametrize(
    ("read", "waits_for"),
    [
        (deployment(observed=1), "its controller has not seen yet"),
        (deployment(updatedReplicas=1, replicas=3), "1/2 worker pods run the new spec"),
        (deployment(replicas=3), "1 old worker pods still to stop"),
        (deployment(availableReplicas=1), "1/2 worker pods of the new spec available"),
    ],
)
def test_a_rollout_under_way_says_what_it_waits_for(read: dict[str, Any], waits_for: str) -> None:
    found = rollout(read)
    assert found is not None
    assert waits_for in found


def test_a_surge_rollout_with_every_desired_pod_available_is_still_a_rollout() -> None:
    """maxSurge 1, maxUnavailable 0: as many pods available as desired, an old one among them."""
    surging = deployment(replicas=3, updatedReplicas=1, availableReplicas=2)
    assert deployment_replicas(surging).available == 2
    assert deployment_replicas(surging).rollout is not None


def test_a_complete_rollout_or_none_at_all_is_none() -> None:
    assert rollout(deployment()) is None
    zero = {
        "metadata": {"generation": 3},
        "spec": {"replicas": 0},
        "status": {"observedGeneration": 3},
    }
    assert rollout(zero) is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def running(registry: Registry, clock: Clock) -> ConsumerLoop:
    """Generation 1 applied and rolled out, its one shard owned: Ready, not reconciling."""
    loop = make_loop()
    loop.observed_generation = None  # as a new object's loop starts
    registry.add(ManagedConsumer("ns", "c", loop))
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    written(loop)
    loop.coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    loop.step(0.0)
    registry.children_applied("ns", "c", None)
    registry.spec_applied("ns", "c", 1)
    assert observed(loop) is None, "applied is not rolled out"
    registry.deployment_seen("ns", "c", Replicas(2, 2), clock())
    return loop


def written(loop: ConsumerLoop) -> dict[str, Any]:
    """The status the loop writes next (the change under test asked for a write)."""
    write = loop.write_due(1e9)  # the status interval long past
    assert write is not None, "the change asked for no status write"
    loop.write_succeeded(write, 0.0)
    return write.body


def observed(loop: ConsumerLoop) -> int | None:
    value = written(loop).get("observedGeneration")
    return None if value is None else int(value)


def test_a_new_spec_is_observed_only_once_a_read_begun_after_its_apply_finds_it_rolled_out() -> (
    None
):
    clock, generation = Clock(), [1]
    registry = Registry(clock)
    loop = running(registry, clock)
    loop.generation = lambda: generation[0]
    assert observed(loop) == 1
    assert reasons(loop)["Reconciling"] == ("False", "Done")

    generation[0] = 2  # the object changed; the operator has not applied it yet
    loop.coordinator.status_changed()  # a heartbeat, say: the next write says so
    assert observed(loop) == 1
    assert reasons(loop)["Reconciling"] == ("True", "ApplyingSpec")

    read_before = clock.now
    clock.now = 5.0
    registry.spec_applied("ns", "c", 2)
    # A read begun before the apply lands late: it says nothing of generation 2.
    registry.deployment_seen("ns", "c", Replicas(2, 2), read_before)
    assert loop.observed_generation == 1
    rolling = Replicas(2, 2, rollout="1/2 worker pods run the new spec")
    registry.deployment_seen("ns", "c", rolling, clock.now)
    assert observed(loop) == 1
    assert reasons(loop)["Reconciling"] == ("True", "RollingOut")
    assert registry.rolling_out("ns", "c")

    clock.now = 8.0
    registry.deployment_seen("ns", "c", Replicas(2, 2), clock.now)
    assert observed(loop) == 2
    assert reasons(loop)["Reconciling"] == ("False", "Done")
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned")
    assert not registry.rolling_out("ns", "c")


def test_a_refused_spec_and_workers_that_do_not_start_are_verdicts_observed_at_once() -> None:
    clock = Clock()
    registry = Registry(clock)
    loop = running(registry, clock)
    loop.generation = lambda: 3
    registry.children_applied("ns", "c", "the pod policy refuses hostNetwork")
    registry.spec_refused("ns", "c", 3)
    assert observed(loop) == 3
    assert reasons(loop)["Stalled"] == ("True", "ChildrenNotApplied")

    loop.generation = lambda: 4
    registry.children_applied("ns", "c", None)
    registry.spec_applied("ns", "c", 4)
    registry.pod_seen("ns", "c", "x", Trouble("ImagePullBackOff", "c-workers-x", "no such image"))
    stuck = Replicas(2, 2, rollout="1/2 worker pods run the new spec")
    registry.deployment_seen("ns", "c", stuck, clock.now)
    assert observed(loop) == 4, "a rollout that will not end is Failed, not InProgress"
    assert reasons(loop)["Stalled"] == ("True", "WorkersNotStarting")


def test_a_restarted_loop_keeps_the_stored_observed_generation_until_told() -> None:
    registry = Registry(Clock())
    loop = make_loop()
    loop.observed_generation = 7  # as `load` reads it from the stored status
    registry.add(ManagedConsumer("ns", "c", loop))
    assert observed(loop) == 7


def test_scaled_to_zero_is_ready_and_not_reconciling() -> None:
    clock = Clock()
    registry = Registry(clock)
    loop = running(registry, clock)
    registry.deployment_seen("ns", "c", Replicas(0, 0), clock.now)
    written(loop)
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned"), "its last worker still runs"
    loop.step(100.0)  # the worker's lease ran out long ago: it is gone
    assert not loop.coordinator.workers
    written(loop)
    assert reasons(loop)["Ready"] == ("True", "ScaledToZero")
    assert reasons(loop)["Reconciling"][0] == "False"
    assert reasons(loop)["Stalled"][0] == "False"


def test_the_deployment_is_read_often_only_while_a_rollout_is_under_way() -> None:
    clock = Clock()
    registry = Registry(clock)
    running(registry, clock)
    assert registry.deployment_read_due("ns", "c")
    clock.now += ROLLOUT_CHECK_SECONDS
    assert not registry.deployment_read_due("ns", "c"), "nothing rolls out: every 15 s"
    clock.now += DEPLOYMENT_CHECK_SECONDS
    assert registry.deployment_read_due("ns", "c")
    registry.spec_applied("ns", "c", 2)
    assert registry.deployment_read_due("ns", "c", force=True), "right after an apply"
    clock.now += ROLLOUT_CHECK_SECONDS
    assert registry.deployment_read_due("ns", "c")


@pytest.mark.parametrize(("stored", "taken"), [(7, 7), ("7", None), (-1, None), (True, None)])
def test_a_loop_starts_from_the_stored_observed_generation_only_if_it_is_one(
    stored: object, taken: int | None
) -> None:
    body = {
        "metadata": {
            "name": "c",
            "uid": "u",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": make_loop().coordinator.spec.model_dump(by_alias=True, exclude_none=True),
        "status": {"observedGeneration": stored},
    }
    writer = StatusWriter(cast(StatusApi, None), "ns", "c", holder="h")
    loop = load(body, writer, LoopSettings(), 0.0, lambda: 8)
    assert loop.observed_generation == taken
