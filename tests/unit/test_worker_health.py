"""Worker pods that never start reach the status (issue 25): a Deployment that applied
fine left Ready True while its pods sat in ImagePullBackOff, CrashLoopBackOff or
CreateContainerConfigError, or its ReplicaSet was refused by a quota."""

from __future__ import annotations

from typing import Any

import pytest

from streamconsumer.controller.consumer.loop import ConsumerLoop
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.workloads.worker_health import (
    Replicas,
    Trouble,
    WorkerHealth,
    deployment_replicas,
    pod_trouble,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models import HeartbeatRequest

from .test_consumer_loop import condition, make_loop, reasons


def pod(name: str = "c-workers-1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name}, "status": status}


def waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": "worker", "state": {"waiting": {"reason": reason, "message": message}}, **extra}


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"],
)
def test_a_container_waiting_for_what_will_not_pass_is_trouble_with_the_kubelets_words(
    reason: str,
) -> None:
    found = pod_trouble(pod(containerStatuses=[waiting(reason, 'secret "creds" not found')]))
    assert found == Trouble(reason, "c-workers-1", 'secret "creds" not found')


def test_a_crash_loop_says_how_the_last_run_ended() -> None:
    crashed = waiting(
        "CrashLoopBackOff",
        "back-off 40s restarting failed container",
        lastState={"terminated": {"exitCode": 1, "reason": "Error"}},
    )
    found = pod_trouble(pod(containerStatuses=[crashed]))
    assert found == Trouble("CrashLoopBackOff", "c-workers-1", "exit code 1: Error")


def test_starting_normally_or_leaving_is_no_trouble() -> None:
    assert pod_trouble(pod(containerStatuses=[waiting("ContainerCreating")])) is None
    assert pod_trouble(pod(containerStatuses=[{"name": "w", "state": {"running": {}}}])) is None
    assert pod_trouble(pod(phase="Pending")) is None
    leaving = pod(containerStatuses=[waiting("ImagePullBackOff")])
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_trouble(leaving) is None


def test_an_unschedulable_pod_and_an_init_container_are_trouble() -> None:
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient memory.",
    }
    found = pod_trouble(pod(conditions=[unschedulable]))
    assert found is not None
    assert found.reason == "Unschedulable"
    assert "Insufficient memory" in found.message
    init = pod(initContainerStatuses=[waiting("ErrImagePull", "not found")])
    assert pod_trouble(init) == Trouble("ErrImagePull", "c-workers-1", "not found")


def test_the_message_is_bounded_and_one_line() -> None:
    found = pod_trouble(pod(containerStatuses=[waiting("ErrImagePull", "x\n" * 5000)]))
    assert found is not None
    assert len(found.message) <= 400
    assert "\n" not in found.message


def test_the_deployments_replica_failure_and_progress_deadline_are_trouble() -> None:
    refused = {
        "spec": {"replicas": 2},
        "status": {
            "conditions": [
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": 'pods "c-workers-1" is forbidden: exceeded quota: no-pods',
                }
            ]
        },
    }
    replicas = deployment_replicas(refused)
    assert (replicas.desired, replicas.available) == (2, 0)
    assert replicas.trouble is not None
    assert replicas.trouble.reason == "ReplicaFailure"
    assert "exceeded quota" in replicas.trouble.message
    late = {
        "spec": {"replicas": 1},
        "status": {
            "availableReplicas": 1,
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": 'ReplicaSet "c-workers-2" has timed out progressing.',
                }
            ],
        },
    }
    trouble = deployment_replicas(late).trouble
    assert trouble is not None
    assert trouble.reason == "ProgressDeadlineExceeded"
    assert deployment_replicas({"spec": {"replicas": 1}, "status": {}}).trouble is None


def test_the_summary_names_the_first_trouble_and_counts_the_rest() -> None:
    pods: dict[str, Trouble | None] = {
        "a": Trouble("ImagePullBackOff", "c-workers-a", "no such image"),
        "b": Trouble("ImagePullBackOff", "c-workers-b", "no such image"),
        "c": None,
    }
    health = WorkerHealth.of(pods, Replicas(desired=3, available=1))
    assert health.not_starting() == (
        "ImagePullBackOff (pod c-workers-a): no such image (and 1 more pods not starting)"
    )
    assert health.starting() is None, "failing, not merely starting"
    quota = Trouble("ReplicaFailure", None, "exceeded quota")
    first = WorkerHealth.of(pods, Replicas(desired=3, available=1, trouble=quota)).not_starting()
    assert first == "ReplicaFailure (Deployment): exceeded quota (and 2 more pods not starting)"
    assert WorkerHealth.of({}, Replicas(3, 1)).starting() == "1/3 worker pods available"
    assert WorkerHealth.of({}, Replicas(3, 3)).starting() is None


def written(loop: ConsumerLoop, now: float) -> None:
    write = loop.write_due(now)
    assert write is not None
    loop.write_succeeded(write, now)


def running_loop() -> ConsumerLoop:
    """A loop whose one shard is owned and whose objects are applied: Ready True."""
    loop = make_loop()
    loop.sync_started(0.0)
    loop.sync_succeeded([Shard("s0")], 0.0)
    written(loop, 0.0)
    loop.coordinator.heartbeat(HeartbeatRequest(worker="w"), 0.0)
    loop.step(0.0)
    loop.children_applied(None)
    written(loop, 1.0)
    return loop


def test_workers_not_starting_make_ready_false_and_stalled_with_an_event() -> None:
    registry = Registry(clock=lambda: 0.0)
    loop = running_loop()
    registry.add(ManagedConsumer("ns", "c", loop))
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned")
    assert reasons(loop)["WorkersAvailable"] == ("Unknown", "NotObserved")
    registry.deployment_seen("ns", "c", Replicas(desired=2, available=1), 2.0)
    written(loop, 2.0)
    assert reasons(loop)["WorkersAvailable"] == ("False", "Starting")
    assert reasons(loop)["Reconciling"] == ("True", "StartingWorkers")
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned"), "a rollout is no failure"
    loop.take_events()

    pulled = Trouble("ImagePullBackOff", "c-workers-x", 'Back-off pulling image "bad:1"')
    registry.pod_seen("ns", "c", "x", pulled)
    written(loop, 3.0)
    assert reasons(loop)["Ready"] == ("False", "WorkersNotStarting")
    assert reasons(loop)["Stalled"] == ("True", "WorkersNotStarting")
    assert reasons(loop)["WorkersAvailable"] == ("False", "WorkersNotStarting")
    assert reasons(loop)["Degraded"][0] == "True"
    assert condition(loop, "Ready")[1] == (
        'ImagePullBackOff (pod c-workers-x): Back-off pulling image "bad:1"'
    )
    events = loop.take_events()
    assert [(e.type, e.reason) for e in events] == [("Warning", "WorkersNotStarting")]

    # The kubelet's back-off turns it to ErrImagePull and back: no new Event each time.
    registry.pod_seen("ns", "c", "x", Trouble("ErrImagePull", "c-workers-x", "not found"))
    written(loop, 4.0)
    assert loop.take_events() == []

    registry.pod_gone("ns", "c", "x")
    registry.deployment_seen("ns", "c", Replicas(desired=2, available=2), 5.0)
    written(loop, 5.0)
    assert reasons(loop)["Ready"] == ("True", "AllShardsOwned")
    assert reasons(loop)["WorkersAvailable"] == ("True", "Available")
    assert reasons(loop)["Stalled"][0] == "False"
    assert [e.reason for e in loop.take_events()] == ["WorkersStarting"]


def test_objects_refused_come_before_workers_not_starting_and_a_restarted_loop_knows() -> None:
    registry = Registry(clock=lambda: 0.0)
    loop = running_loop()
    registry.add(ManagedConsumer("ns", "c", loop))
    registry.pod_seen("ns", "c", "x", Trouble("CrashLoopBackOff", "c-workers-x", "exit code 1"))
    loop.children_applied("Deployment c-workers was refused (422): no")
    written(loop, 2.0)
    assert reasons(loop)["Ready"] == ("False", "ChildrenNotApplied")
    assert reasons(loop)["WorkersAvailable"] == ("False", "WorkersNotStarting")

    again = make_loop()  # the loop restarts: the registry still knows
    registry.remove("ns", "c")
    registry.add(ManagedConsumer("ns", "c", again))
    assert again.workers_health is not None
    assert again.workers_health.not_starting() == "CrashLoopBackOff (pod c-workers-x): exit code 1"
    registry.forget("ns", "c")
    registry.add(ManagedConsumer("ns", "c", make_loop()))
    assert registry.get("ns", "c") is not None
    assert registry.get("ns", "c").loop.workers_health is None  # type: ignore[union-attr]
