"""Checkpoints that outlive the object (issue 25), on the real parts: a StreamConsumer
deleted as a GitOps prune has its workers hand off and its lease table kept; applied
again, it resumes from it: nothing lost, nothing processed twice. Without that, the
checkpoints died with the status and TRIM_HORIZON replayed the whole retention."""

from __future__ import annotations

import json

from kubernetes import client as k8s

from streamconsumer.models.kept import KEPT_LABEL, TABLE_KEY
from testbed.scenario import Scenario
from testbed.waiting import wait_for

KEPT = "clicks-checkpoints"


def test_a_pruned_consumer_applied_again_resumes_from_its_kept_checkpoints(
    scenario: Scenario,
) -> None:
    scenario.start(shards=2, replicas=2)
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "the records before the prune")
    manifest = scenario.manifest(replicas=2, lease_seconds=6.0, delay=0.0)

    scenario.consumers.delete(scenario.name)  # what a GitOps prune does
    wait_for(lambda: not scenario.consumers.exists(scenario.name), 90, "the object gone")
    core = k8s.CoreV1Api(scenario.api_client)
    kept = core.read_namespaced_config_map(KEPT, scenario.namespace)
    assert kept.metadata is not None
    assert (kept.metadata.labels or {})[KEPT_LABEL] == scenario.name
    assert not kept.metadata.owner_references, "it must outlive the object"
    table = json.loads((kept.data or {})[TABLE_KEY])
    assert table["drained"] is True, "every worker handed off before it was kept"
    assert all(not lease.get("owner") for lease in table["status"]["leases"].values())
    assert any(r == "CheckpointsKept" for r, _ in scenario.events())

    scenario.produce(100)  # while no consumer exists
    wait_for(
        lambda: (
            not k8s.AppsV1Api(scenario.api_client)
            .list_namespaced_deployment(scenario.namespace)
            .items
        ),
        90,
        "the old workers collected",
    )
    scenario.consumers.create(manifest)  # applied again
    wait_for(scenario.all_processed, 90, "the records put while it was gone")
    scenario.delivered(duplicates_at_most=0)
    assert any(r == "CheckpointsResumed" and "after a hand-off" in m for r, m in scenario.events())
