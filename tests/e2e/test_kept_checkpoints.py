"""Checkpoints that outlive the object (issue 25), on the real parts: a StreamConsumer
deleted as a GitOps prune has its workers hand off and its lease table kept; applied
again, it resumes from it: nothing lost, nothing processed twice. Without that, the
checkpoints died with the status and TRIM_HORIZON replayed the whole retention."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s

from streamconsumer.core.lineage import expand
from streamconsumer.models.kept import KEPT_LABEL, STREAM, TABLE_KEY
from testbed.kinesis import delete_stream, split_shard_in_half
from testbed.scenario import Scenario
from testbed.waiting import wait_for

KEPT = "clicks-checkpoints"
FIRST = "shardId-000000000000"


def kept_table(scenario: Scenario) -> dict[str, Any]:
    core = k8s.CoreV1Api(scenario.api_client)
    kept = core.read_namespaced_config_map(KEPT, scenario.namespace)
    return dict(json.loads((kept.data or {})[TABLE_KEY]))


def workers_collected(scenario: Scenario) -> bool:
    apps = k8s.AppsV1Api(scenario.api_client)
    return not apps.list_namespaced_deployment(scenario.namespace).items


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
    table = kept_table(scenario)
    assert table["drained"] is True, "every worker handed off before it was kept"
    assert all(not lease.get("owner") for lease in table["status"]["leases"].values())
    assert any(r == "CheckpointsKept" for r, _ in scenario.events())

    scenario.produce(100)  # while no consumer exists
    wait_for(lambda: workers_collected(scenario), 90, "the old workers collected")
    scenario.consumers.create(manifest)  # applied again
    wait_for(scenario.all_processed, 90, "the records put while it was gone")
    scenario.delivered(duplicates_at_most=0)
    assert any(r == "CheckpointsResumed" and "after a hand-off" in m for r, m in scenario.events())


def test_checkpoints_of_a_stream_since_deleted_and_created_again_are_not_resumed(
    scenario: Scenario,
) -> None:
    """Kinesis gives a stream created again under its name the same ARN and the same
    shard ids. Resumed, the old stream's table would take the new shardId-000000000000
    for its namesake, split and finished long ago, and skip every record put in it."""
    scenario.start(shards=1, replicas=1)
    scenario.produce(20)
    split_shard_in_half(scenario.kinesis.client, scenario.stream, FIRST)
    scenario.produce(20)

    def first_finished() -> bool:
        status = scenario.status()
        lease = status.get("leases", {}).get(FIRST) or {}
        finished = expand(status.get("finishedShards") or [])
        return lease.get("state") == "Finished" or FIRST in finished

    wait_for(lambda: scenario.all_processed() and first_finished(), 90, "the split read")
    manifest = scenario.manifest(replicas=1, lease_seconds=6.0, delay=0.0)
    scenario.consumers.delete(scenario.name)
    wait_for(lambda: not scenario.consumers.exists(scenario.name), 90, "the object gone")
    kept_stream = kept_table(scenario)["status"][STREAM]
    assert kept_stream.startswith("arn:aws:kinesis:"), kept_stream

    delete_stream(scenario.kinesis.client, scenario.stream)
    scenario.create_source(1)  # the same name, the same shard id
    scenario.produce(30)
    wait_for(lambda: workers_collected(scenario), 90, "the old workers collected")
    scenario.consumers.create(manifest)
    wait_for(scenario.all_processed, 90, "the records of the stream created again")
    scenario.delivered(duplicates_at_most=0)
    refused = [m for r, m in scenario.events() if r == "CheckpointsNotResumed"]
    assert refused, scenario.events()
    assert "deleted and created again" in refused[0]
    assert kept_stream in refused[0]


def test_a_stream_created_again_under_a_running_consumer_stops_it_until_created_anew(
    scenario: Scenario,
) -> None:
    """The same stream created again while its consumer runs: before, its listing was
    applied to the old table and the new shardId-000000000000, taken for the finished
    parent of the split, was never read. Now the consumer stops and says so; deleted and
    applied again, it starts the new stream at its initialPosition: nothing lost."""
    scenario.start(shards=1, replicas=1)
    scenario.produce(20)
    split_shard_in_half(scenario.kinesis.client, scenario.stream, FIRST)
    scenario.produce(20)
    wait_for(scenario.all_processed, 90, "the split read")
    old_stream = scenario.status().get("stream")
    assert old_stream is not None
    assert old_stream.startswith("arn:aws:kinesis:")

    delete_stream(scenario.kinesis.client, scenario.stream)
    scenario.create_source(1)
    scenario.produce(30)

    def stopped() -> bool:
        ready = {c["type"]: c for c in scenario.status().get("conditions", [])}.get("Ready", {})
        return bool(ready.get("reason") == "StreamRecreated")

    wait_for(stopped, 90, "Ready=False, StreamRecreated")
    assert any(r == "StreamRecreated" for r, _ in scenario.events())
    assert scenario.status()["stream"] == old_stream, "the table stays the old stream's"

    manifest = scenario.manifest(replicas=1, lease_seconds=6.0, delay=0.0)
    scenario.consumers.delete(scenario.name)
    wait_for(lambda: not scenario.consumers.exists(scenario.name), 90, "the object gone")
    assert kept_table(scenario)["status"][STREAM] == old_stream
    wait_for(lambda: workers_collected(scenario), 90, "the old workers collected")
    scenario.consumers.create(manifest)
    wait_for(scenario.all_processed, 90, "the records of the stream created again")
    scenario.delivered(duplicates_at_most=0)
    assert scenario.status()["stream"] != old_stream
