"""Thin worker pods (processes run by the local kubelet for a Deployment the operator
made, with no Java anywhere they look) write page views through a standalone Spark
cluster's Spark Connect server into Delta, one killed between a commit and its checkpoint:
the page views equal what was produced. On the cluster's xdist worker (testbed/suite.py),
which it shares with tests/spark/test_spark_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.clickstream import ClickstreamRun
from testbed.scenario import Scenario
from testbed.spark_cluster import SparkCluster, without_java_env
from testbed.spark_cluster_app import MARKER_ENV, batch_commits
from testbed.waiting import wait_for

pytestmark = pytest.mark.spark


def test_thin_workers_write_delta_on_a_spark_cluster_once(
    scenario: Scenario, spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """Worker processes with no Java anywhere they look write through the cluster's Spark
    Connect server into Delta; one dies between a commit and its checkpoint, and the
    shard's next owner replays that batch (committed twice in the table's log)."""
    marker = tmp_path / "died"
    run = ClickstreamRun(scenario, "cluster", tmp_path / "data")
    run.start(
        shards=4,
        replicas=2,
        lease_seconds=6.0,
        env={
            "SPARK_REMOTE": spark_cluster.connect_url,
            "CLICKSTREAM_FORMAT": "delta",
            MARKER_ENV: str(marker),
            **without_java_env(),
        },
    )
    run.produce(400)
    wait_for(lambda: run.counted() == run.expected(), 300, "the first page views")
    # The kill fires on the first second write of a shard's processor (one per shard and
    # process): usually a batch of these records, but possibly one above already (a
    # shard's first records may span two batches). These make sure some shard gets there.
    run.produce(400)
    wait_for(marker.exists, 120, "a worker killed between a commit and its checkpoint")
    # The shard's next owner (once the lease expires) starts at the checkpoint, before the
    # batch the dead worker committed, and commits that batch again (the counts were
    # already right: the first commit holds its rows).
    died = json.loads(marker.read_text())
    wait_for(
        lambda: len(batch_commits(run.output, died["shard_id"], died["batch"])) >= 2,
        180,
        f"{died}, committed before the kill, replayed",
        poll=1.0,
    )
    wait_for(lambda: run.counted() == run.expected(), 300, "page views after the kill")
    # The replacement pod joins and takes shards; the replayed batch replaced itself.
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 180, "2/2 balance again")
    assert run.counted() == run.expected()
    assert sum((run.counted() or {}).values()) == 800
