"""The switch from KCL (issue 43) on real parts: a KCL application's lease table in
DynamoDB Local, as KCL writes it (a parent split and finished, a child at TRIM_HORIZON, a
shard checkpointed mid-stream), is imported by `streamconsumer checkpoints import
--from-kcl-table` and the StreamConsumer goes on from it: no record KCL checkpointed is
delivered again, every other record exactly once. A table whose leases a KCL worker still
renews is refused, and nothing is kept.

Then the whole way with the real KCL: kclpy 3.1.3's MultiLangDaemon (the JVM and jars
`make peers-deps` installs, as `make bench-peers` runs them) consumes the stream with a
kclpy processor that checkpoints part way, and stops; the stream splits; the table is
imported and the StreamConsumer goes on with the same processor class."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from boto3.dynamodb.types import TypeSerializer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bench.peers import install
from bench.peers.kcl import KclWorker, tuned
from streamconsumer.controller.names import kept_checkpoints
from testbed.dynamodb import DynamoDBLocal, scan_all
from testbed.kinesis import list_all_shards, split_shard_in_half
from testbed.processes import BRIEF_JVM_OPTIONS
from testbed.scenario import Scenario, python_path
from testbed.suite import COUNTS
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


def import_kcl(
    scenario: Scenario, dynamodb: DynamoDBLocal, manifest: Path, table: str = TABLE
) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "streamconsumer.cli", "checkpoints", "import",
         "--from-kcl-table", table, "--for", str(manifest), "--watch", "2",
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


KCL_PROCESSOR = "testbed.kclpy_recording:RecordingKclApp"  # imports kclpy: not here
KCL_PUT, KCL_CHECKPOINTS_BELOW, PUT_AFTER_SPLIT = 60, 30, 30  # records r-0 .. r-89
# As `make bench-peers` tunes KCL, but a lease that outlasts a loaded machine's stalls (one
# worker: nothing to fail over), leases assigned as soon as they exist, and on SIGTERM a
# graceful shutdown (shutdown_requested to each processor), which the daemon otherwise skips.
KCL_SETTINGS = {
    **tuned(lease_ms=20_000, idle_ms=500, max_records=10),
    "leaseAssignmentIntervalMillis": "2000",
    "shutdownGraceMillis": "5000",
}


def kcl_checkpoints(dynamodb: DynamoDBLocal, table: str) -> dict[str, str]:
    """Each lease's checkpoint, as KCL keeps it in its lease table."""
    items = scan_all(dynamodb.client, table)
    return {item["leaseKey"]["S"]: item["checkpoint"]["S"] for item in items}


def test_the_real_kcl_then_a_consumer_with_its_processor(
    kinesalite_scenario: Scenario, dynamodb_local: DynamoDBLocal, record_property: Any
) -> None:
    """KCL's MultiLangDaemon runs a kclpy processor that checkpoints each shard up to its
    last record below r-30, processes all of r-0 .. r-59, and is stopped; a shard splits and
    r-60 .. r-89 are put; its lease table is imported and a StreamConsumer runs the same
    processor class: nothing lost, each side processed each record once, and the records
    processed by both are exactly those after KCL's last checkpoint of their shard."""
    for step in (install.KCLPY, install.H1_CLASSES):
        assert install.done(step), f"{step} is not installed: make peers-deps"
    scenario = kinesalite_scenario
    scenario.create_source(3)
    scenario.produce(KCL_PUT)
    application = f"kcl-{scenario.stream}"  # KCL's lease table is named after it
    kcl = KclWorker(
        "kcl-1",
        scenario.workdir / "kcl",
        stream=scenario.stream,
        application=application,
        kinesis_url=scenario.kinesis.endpoint_url,
        dynamodb_url=dynamodb_local.endpoint_url,
        settings=KCL_SETTINGS,
        env={
            "PYTHONPATH": python_path(),
            "RECORD_DIR": str(scenario.records_dir),
            "RECORD_CHECKPOINT_BELOW": str(KCL_CHECKPOINTS_BELOW),
        },
        executable=f"{sys.executable} -m testbed.kclpy_recording",
        jvm_options=BRIEF_JVM_OPTIONS,
    )
    try:
        kcl.server.wait_until(scenario.all_processed, 240, "processing every record")
        stream = records_by_shard(scenario)
        # Where the processor asked KCL to checkpoint each shard (its initial position
        # where it asked nothing), and KCL wrote that into its table.
        asked = {
            shard: ([seq for seq, value in records if int(value[2:]) < KCL_CHECKPOINTS_BELOW]
                    or ["TRIM_HORIZON"])[-1]
            for shard, records in stream.items()
        }  # fmt: skip
        kcl.server.wait_until(
            lambda: kcl_checkpoints(dynamodb_local, application) == asked, 60, "checkpointing"
        )
        # Stopped as a pod is: SIGTERM to the JVM alone, which shuts its processors down.
        os.kill(kcl.pid, signal.SIGTERM)
        kcl.server.process.wait(60)
    finally:
        kcl.stop()
    assert kcl_checkpoints(dynamodb_local, application) == asked
    after = {
        value
        for shard, records in stream.items()
        for seq, value in records
        if asked[shard] == "TRIM_HORIZON" or int(seq) > int(asked[shard])
    }
    by_kcl = Counter(e["data"] for e in scenario.report().events)
    assert set(by_kcl) == scenario.produced
    assert max(by_kcl.values()) == 1
    assert after, "KCL checkpointed every record"
    assert after != set(by_kcl), "KCL checkpointed no record"

    parent = sorted(stream)[0]
    split_shard_in_half(scenario.kinesis.client, scenario.stream, parent)
    scenario.produce(PUT_AFTER_SPLIT)
    manifest = scenario.workdir / "clicks.yaml"
    manifest.write_text(yaml.safe_dump(scenario.manifest(1, 6.0, 0.0, processor=KCL_PROCESSOR)))
    imported = import_kcl(scenario, dynamodb_local, manifest, application)
    assert imported.returncode == 0, imported.stderr
    assert "3 shards' checkpoints kept" in imported.stdout, imported.stdout
    scenario.start(
        shards=None,
        replicas=1,
        processor=KCL_PROCESSOR,
        # kclpy (its Python package), as a team's image has it.
        pod_env=lambda pod: {"PYTHONPATH": os.pathsep.join([python_path(), str(install.KCLPY)])},
    )
    owed = after | (scenario.produced - set(by_kcl))

    def by_ours() -> Counter[str]:
        return Counter(e["data"] for e in scenario.report().events if e["worker"] != "kcl")

    wait_for(
        lambda: owed <= set(by_ours()),
        120,
        "the records after KCL's checkpoints",
        details=lambda: f"not processed: {sorted(owed - set(by_ours()))}",
    )
    report = scenario.delivered(duplicates_at_most=None)  # nothing lost, order per shard
    ours = by_ours()
    assert max(ours.values()) == 1
    assert set(ours) & set(by_kcl) == after, "not exactly the records after KCL's checkpoints"
    assert report.duplicates == len(after)
    shards = list_all_shards(scenario.kinesis.client, scenario.stream)
    children = {s["ShardId"] for s in shards if s.get("ParentShardId")}
    on_children = sum(len(report.by_shard.get(child, [])) for child in children)
    assert on_children, "no record on the split's children"
    assert report.children_before_parents(shards) == []
    assert any(r == "CheckpointsResumed" for r, _ in scenario.events())
    counts = (
        f"{len(scenario.produced)} records put on 3 shards, one split after KCL stopped: "
        f"KCL (kclpy's MultiLangDaemon) processed {sum(by_kcl.values())} and checkpointed "
        f"{len(by_kcl) - len(after)} of them; the StreamConsumer, with the same kclpy "
        f"processor, processed {sum(ours.values())} ({on_children} on the split's children); "
        f"lost {len(report.lost)}, duplicates {report.duplicates} "
        "(each after KCL's last checkpoint of its shard)"
    )
    print(counts)
    record_property(COUNTS, counts)
