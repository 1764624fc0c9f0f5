"""The lag autoscaler: load faster than one worker can process scales the consumer up; once
it has caught up it scales back down. Nothing is lost; moves are hand-offs."""

from __future__ import annotations

import threading

from kubernetes import client as k8s

from streamconsumer.controller.names import worker_deployment
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_lag_scales_up_catches_up_and_scales_down(scenario: Scenario) -> None:
    scenario.start(
        shards=4,
        replicas=1,
        # One batch at a time per worker, 1 s each: one worker calls each of its 4 shards
        # every 4 s or so, twice the target lag, whatever the machine's load (at 0.5 s
        # the margin was nil, and a loaded CI run kept up with no scale-up).
        delay=1.0,
        processor_env={"RECORD_SERIAL": "1"},
        autoscaling={
            "minReplicas": 1,
            "maxReplicas": 4,
            "targetLagSeconds": 2,
            "scaleUpStabilizationSeconds": 2,
            "scaleDownStabilizationSeconds": 10,
        },
    )
    kubelet = scenario.kubelet
    assert kubelet is not None
    stop = threading.Event()

    def produce() -> None:  # ~300 records/s
        while not stop.wait(0.2):
            scenario.produce(60)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_for(lambda: (scenario.status().get("desiredReplicas") or 1) > 1, 90, "a scale-up")
        wait_for(lambda: len(kubelet.running()) > 1, 60, "more worker pods running")
        peak = scenario.status()["desiredReplicas"]
    finally:
        stop.set()
        producer.join()
    wait_for(scenario.all_processed, 120, "the workers to catch up")
    wait_for(lambda: scenario.status().get("desiredReplicas") == 1, 90, "the scale-down")
    wait_for(lambda: len(kubelet.running()) == 1, 60, "one worker pod left")

    scenario.delivered()  # nothing lost, in order, no duplicates: scaling moves hand off
    scaled = [message for reason, message in scenario.events() if reason == "Scaled"]
    assert any(m.startswith("workers 1 -> ") for m in scaled), scaled
    assert any(m.startswith(f"workers {n} -> ") for n in range(2, peak + 1) for m in scaled)
    assert scenario.consumers.get(scenario.name)["spec"]["replicas"] == 1, "spec untouched"


def test_a_hand_scaling_the_workers_to_zero_is_undone(scenario: Scenario) -> None:
    """22.18: the autoscaler trusted the count it had set. A `kubectl scale` of the
    workers' Deployment to 0 (as a late scale call of an earlier leader would) left the
    one shard without a worker for good, the lag asking for the 1 it believed ran."""
    scenario.start(
        shards=1,
        replicas=1,
        autoscaling={"minReplicas": 1, "maxReplicas": 2, "targetLagSeconds": 30},
    )
    kubelet = scenario.kubelet
    assert kubelet is not None
    scenario.produce(20)
    wait_for(scenario.all_processed, 90, "the first records")
    apps = k8s.AppsV1Api(scenario.api_client)
    deployment = worker_deployment(scenario.name)
    ran = set(kubelet.running())
    apps.patch_namespaced_deployment_scale(
        deployment, scenario.namespace, {"spec": {"replicas": 0}}
    )
    # Gone: the operator may set the count back before it has left (it reads the
    # Deployment every DEPLOYMENT_CHECK_SECONDS, whenever the last read was).
    wait_for(lambda: not ran & set(kubelet.running()), 60, "the worker pod gone")
    scenario.produce(20)

    def replicas() -> int:
        read = apps.read_namespaced_deployment(deployment, scenario.namespace)
        return int(read.spec.replicas or 0)

    wait_for(lambda: replicas() == 1, 60, "the operator to set the workers back to 1")
    wait_for(scenario.all_processed, 90, "the records sent while no worker ran")
    scenario.delivered()  # nothing lost, in order, no duplicates
    scaled = [message for reason, message in scenario.events() if reason == "Scaled"]
    assert any(m.startswith("workers 0 -> 1") for m in scaled), scaled
