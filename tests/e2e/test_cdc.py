"""The CDC example end to end: a DynamoDB table (DynamoDB Local) mirrored into Delta by
worker pods running Spark (the local kubelet's processes, for a Deployment the real
operator made). Random puts, overwrites and deletes; the worker holding the table's shard
is killed midway; at the end the Delta table equals the DynamoDB table, row for row."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from cdc.pipeline import read_mirror

from streamconsumer.sources.dynamodb_streams import partition_key
from streamconsumer.spark.session import JARS_DIR_ENV
from testbed.dynamodb import scan_all
from testbed.scenario import TESTS_DIR
from testbed.table_scenario import TableScenario
from testbed.waiting import wait_for

pytestmark = pytest.mark.spark

PYTHONPATH = f"{TESTS_DIR}{os.pathsep}{TESTS_DIR.parent / 'examples'}"


def table_rows(scenario: TableScenario) -> dict[str, dict[str, Any]]:
    items = scan_all(scenario.dynamodb.client, scenario.table)
    return {partition_key({"pk": item["pk"]}): item for item in items}


def test_the_delta_mirror_equals_the_table_across_a_worker_kill(
    table_scenario: TableScenario, delta_jars: Path, tmp_path: Path
) -> None:
    scenario = table_scenario
    mirror = str(tmp_path / "mirror")
    scenario.start(
        shards=1,
        replicas=2,
        lease_seconds=10.0,
        processor="cdc.pipeline:MirrorToDelta",
        processor_env={
            "PYTHONPATH": PYTHONPATH,
            "CDC_OUTPUT": mirror,
            "CDC_BATCH_SECONDS": "2",
            "SPARK_DRIVER_MEMORY": "512m",
            JARS_DIR_ENV: str(delta_jars),  # as the Spark worker image sets it
        },
    )

    def mirrored() -> bool:
        return read_mirror(mirror) == table_rows(scenario)

    scenario.produce(150)
    wait_for(mirrored, 240, "the first changes mirrored")
    (shard,) = scenario.status()["leases"]
    # Each committed batch moves the checkpoint (after its MERGE): the new owner resumes
    # there, not at the beginning.
    wait_for(
        lambda: scenario.status()["leases"][shard].get("checkpoint") is not None,
        30,
        "a checkpoint after the first batches",
    )
    owner = scenario.status()["leases"][shard]["owner"]
    scenario.produce(100)
    assert scenario.kubelet is not None
    scenario.kubelet.kill(owner, signal.SIGKILL)  # midway: changes still arriving
    scenario.produce(150)
    wait_for(mirrored, 240, "every change mirrored after the kill")
    assert scenario.status()["leases"][shard]["owner"] != owner
    rows = table_rows(scenario)
    assert read_mirror(mirror) == rows
    assert len(rows) > 10
    assert {token.split(":")[0] for token in scenario.produced} == {"INSERT", "MODIFY", "REMOVE"}
