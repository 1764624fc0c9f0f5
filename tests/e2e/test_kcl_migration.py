"""The switch from KCL (issue 43) on real parts: a KCL application's lease table in
DynamoDB Local, as KCL writes it (a parent split and finished, a child at TRIM_HORIZON, a
shard checkpointed mid-stream), is imported by `streamconsumer checkpoints import
--from-kcl-table` and the StreamConsumer goes on from it: no record KCL checkpointed is
delivered again, every other record exactly once. A table whose leases a KCL worker still
renews is refused, and nothing is kept."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml
from boto3.dynamodb.types import TypeSerializer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.names import kept_checkpoints
from testbed.dynamodb import DynamoDBLocal
from testbed.kinesis import list_all_shards, split_shard_in_half
from testbed.scenario import Scenario
from testbed.waiting import wait_for

TABLE = "clicks-kcl-app"


def records_by_shard(scenario: Scenario) -> dict[str, list[tuple[str, str]]]:
    """Each shard's (sequence number, value) in order, read from TRIM_HORIZON."""
    client = scenario.kinesis.client
    found: dict[str, list[tuple[str, str]]] = {}
    for shard in list_all_shards(client, scenario.stream):
        iterator = client.get_shard_iterator(
            StreamName=scenario.stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records: list[tuple[str, str]] = []
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=1000)
            records += [(r["SequenceNumber"], r["Data"].decode()) for r in page["Records"]]
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
        found[shard["ShardId"]] = records
    return found


def kcl_lease(shard_id: str, checkpoint: str, parents: list[str]) -> dict[str, Any]:
    """An item as KCL 3.x writes it (amazon-kinesis-client's DynamoDBLeaseSerializer)."""
    lease: dict[str, Any] = {
        "leaseKey": shard_id,
        "checkpoint": checkpoint,
        "checkpointSubSequenceNumber": 0,
        "leaseCounter": 41,
        "leaseOwner": "kcl-worker-1",
        "ownerSwitchesSinceCheckpoint": 0,
    }
    if parents:
        lease["parentShardId"] = set(parents)
    serializer = TypeSerializer()
    return {key: serializer.serialize(value) for key, value in lease.items()}


def import_kcl(scenario: Scenario, dynamodb: DynamoDBLocal, manifest: Path) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "streamconsumer.cli", "checkpoints", "import",
         "--from-kcl-table", TABLE, "--for", str(manifest), "--watch", "2",
         "-n", scenario.namespace, "--kubeconfig", str(scenario.plane.kubeconfig)],
        capture_output=True, text=True, timeout=120,
        env={
            "COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": str(scenario.workdir),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "AWS_ENDPOINT_URL_DYNAMODB": dynamodb.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        },
    )  # fmt: skip


def kept(scenario: Scenario) -> bool:
    core = k8s.CoreV1Api(scenario.api_client)
    try:
        core.read_namespaced_config_map(kept_checkpoints(scenario.name), scenario.namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_a_consumer_goes_on_where_kcl_checkpointed(
    scenario: Scenario, dynamodb_local: DynamoDBLocal
) -> None:
    scenario.create_source(2)
    scenario.produce(40)
    first = sorted(s["ShardId"] for s in list_all_shards(scenario.kinesis.client, scenario.stream))
    parent, other = first
    split_shard_in_half(scenario.kinesis.client, scenario.stream, parent)
    scenario.produce(40)
    stream = records_by_shard(scenario)
    left, right = sorted(set(stream) - {parent, other})

    # What KCL had done when it stopped: the parent to its end, 5 records of the other
    # shard, the first record of one child; the other child not started.
    done = {value for _, value in stream[parent]} | {value for _, value in stream[other][:5]}
    leases = [
        kcl_lease(parent, "SHARD_END", []),
        kcl_lease(other, stream[other][4][0], []),
        kcl_lease(right, "TRIM_HORIZON", [parent]),
    ]
    if stream[left]:
        leases.append(kcl_lease(left, stream[left][0][0], [parent]))
        done.add(stream[left][0][1])
    else:
        leases.append(kcl_lease(left, "TRIM_HORIZON", [parent]))
    dynamodb = dynamodb_local.client
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for lease in leases:
        dynamodb.put_item(TableName=TABLE, Item=lease)
    manifest = scenario.workdir / "clicks.yaml"
    manifest.write_text(yaml.safe_dump(scenario.manifest(1, 6.0, 0.0)))

    # A KCL worker still running renews its leases: refused, nothing kept.
    stop = threading.Event()

    def renewing() -> None:
        while not stop.wait(0.3):
            dynamodb.update_item(
                TableName=TABLE,
                Key={"leaseKey": {"S": other}},
                UpdateExpression="ADD leaseCounter :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )

    renewer = threading.Thread(target=renewing, daemon=True)
    renewer.start()
    try:
        refused = import_kcl(scenario, dynamodb_local, manifest)
    finally:
        stop.set()
        renewer.join()
    assert refused.returncode != 0, refused.stdout
    assert "held by KCL workers still running (kcl-worker-1)" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert not kept(scenario)

    imported = import_kcl(scenario, dynamodb_local, manifest)
    assert imported.returncode == 0, imported.stderr
    assert "4 shards' checkpoints kept" in imported.stdout, imported.stdout

    scenario.produced -= done  # KCL processed these: they must not come again
    scenario.start(shards=None, replicas=1)
    wait_for(scenario.all_processed, 120, "the records KCL had not checkpointed")
    report = scenario.delivered(duplicates_at_most=0)
    again = {value for values in report.by_shard.values() for value in values} & done
    assert not again, f"{len(again)} records KCL had checkpointed were delivered again"
    assert any(r == "CheckpointsResumed" for r, _ in scenario.events())
