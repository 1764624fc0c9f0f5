"""A bounded consumer (`spec.end`, issue 43) beside a live one on the same stream, on the
real parts: a window with a split inside it is replayed into a consumer of its own, which
delivers every record of the window once and none after it, ends at the end, and reaches
a steady Complete state (its condition, its kubectl column, an Event, its workers scaled to
zero, Current for kstatus and Healthy for Argo CD) while the live consumer reads on."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from streamconsumer.controller.names import worker_deployment
from streamconsumer.models.resource import GROUP, PLURAL, VERSION
from testbed.argocd import health
from testbed.kinesis import list_all_shards, split_shard_in_half
from testbed.recording import read_report
from testbed.scenario import Scenario
from testbed.suite import COUNTS
from testbed.waiting import wait_for

LEASE = 4.0
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    found = [c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == type_]
    return found[0] if found else None


def columns(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The object as `kubectl get` shows it: the CRD's printer columns, by name."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    request = api_client.param_serialize(
        "GET", path, header_params={"Accept": TABLE}, auth_settings=["BearerToken"]
    )
    answer = api_client.call_api(*request[:3])
    table = json.loads(answer.read())  # type: ignore[no-untyped-call]  # the client is untyped
    names = [column["name"] for column in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


def test_a_window_replayed_beside_the_live_consumer_ends_complete(
    scenario: Scenario,
    kstatus: Path,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    scenario.start(shards=2, replicas=1, lease_seconds=LEASE)
    client = scenario.kinesis.client
    scenario.produce(30)
    first = sorted(s["ShardId"] for s in list_all_shards(client, scenario.stream))[0]
    split_shard_in_half(client, scenario.stream, first)  # inside the window
    scenario.produce(30)
    window = set(scenario.produced)
    time.sleep(1.0)
    end = datetime.now(UTC)
    time.sleep(1.0)

    replay = Scenario(
        scenario.plane,
        scenario.api_client,
        scenario.kinesis,
        scenario.namespace,
        scenario.stream,
        tmp_path / "replay",
        name="replay",
    )
    manifest = replay.manifest(replicas=2, lease_seconds=LEASE, delay=0.0)
    manifest["spec"]["end"] = {"timestamp": end.isoformat()}
    replay.start_kubelet()
    try:
        replay.consumers.create(manifest)
        scenario.produce(30)  # past the end: the live consumer's, never the replay's

        def complete() -> bool:
            said = condition(replay.consumers.get("replay"), "Complete")
            return said is not None and said["status"] == "True"

        wait_for(complete, 120, "the replay Complete", details=lambda: str(replay.status()))
        kubelet = replay.kubelet
        assert kubelet is not None
        wait_for(lambda: not kubelet.running(), 60, "the replay's workers gone")

        replayed = read_report(replay.records_dir, window)
        seen = {event["data"] for event in replayed.events}
        past = seen - window
        record_property(
            COUNTS,
            f"{len(window)} records in the window (a split inside it), {len(seen & window)} "
            f"replayed ({replayed.duplicates} duplicates), {len(past)} past the end",
        )
        assert replayed.lost == set(), f"{len(replayed.lost)} records of the window lost"
        assert past == set(), f"delivered past the end: {sorted(past)[:5]}"
        assert replayed.duplicates == 0
        assert replayed.order_violations == []

        body = replay.consumers.get("replay")
        ready = condition(body, "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "Complete")
        verdict = subprocess.run(
            [str(kstatus)], input=json.dumps(body), capture_output=True, text=True, check=True
        )
        assert json.loads(verdict.stdout)["status"] == "Current"
        assert health(body)["status"] == "Healthy"
        assert columns(scenario.api_client, scenario.namespace, "replay")["Complete"] == "True"
        deployment = k8s.AppsV1Api(scenario.api_client).read_namespaced_deployment(
            worker_deployment("replay"), scenario.namespace
        )
        assert deployment.spec.replicas == 0
        events = k8s.CoreV1Api(scenario.api_client).list_namespaced_event(scenario.namespace)
        told = [
            e.reason
            for e in events.items
            if e.involved_object.name == "replay" and e.reason == "Complete"
        ]
        assert told == ["Complete"], told

        # The live consumer reads on, the records past the end too; it never completes.
        wait_for(scenario.all_processed, 90, "the live consumer's records")
        scenario.delivered(duplicates_at_most=0)
        live = scenario.consumers.get(scenario.name)
        assert condition(live, "Complete") is None
    finally:
        replay.stop()
