"""The Spark tier on a standalone cluster (a master and two workers from pyspark's own
distribution) through its Spark Connect server, as thin workers use it: change data from
four shards into one mirror without a commit race, the bronze job with a transform the
server cannot import, and Spark settings that let several pods share the cluster."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cdc.pipeline import read_mirror
from clickstream.events import expected_page_views, make_events
from clickstream.pipeline import page_views_per_minute, read_page_views
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from streamconsumer.processor import Record
from streamconsumer.spark import BronzeProcessor, DeltaChangesSink, apply_changes, bronze_job
from streamconsumer.spark.session import CONF_ENV
from streamconsumer.spark.sinks import Merge
from streamconsumer.testing import ProcessorHarness
from testbed.cdc_changes import ChangeBatch, change_batches, expected_mirror
from testbed.processes import Server
from testbed.spark_cluster import SparkCluster, clean_argv, daemon_env

pytestmark = pytest.mark.spark
QUERY_SECONDS = 300


def cluster_session(cluster: SparkCluster) -> SparkSession:
    """A Spark Connect session of its own on the cluster's server, as a thin worker's,
    whatever SPARK_REMOTE the `spark` fixture has set in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SPARK_REMOTE", raising=False)
        return SparkSession.builder.remote(cluster.connect_url).create()


@pytest.fixture
def connect(spark_cluster: SparkCluster) -> Iterator[SparkSession]:
    session = cluster_session(spark_cluster)
    yield session
    session.stop()


def ran_to_end(query: StreamingQuery) -> None:
    """The availableNow job ended, within QUERY_SECONDS: a job that waits for cores or a
    lost executor fails the test rather than hang it (a signal cannot interrupt the wait)."""
    assert query.awaitTermination(QUERY_SECONDS), f"the job still running after {QUERY_SECONDS} s"


def land(session: SparkSession, sink: DeltaChangesSink, batches: list[ChangeBatch]) -> None:
    for batch in batches:
        sink.write(session.createDataFrame(batch.rows), batch.info)


def test_four_shards_land_changes_and_one_job_applies_them_exactly(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    changes, mirror, job = (str(tmp_path / name) for name in ("changes", "mirror", "job"))
    shards = [change_batches(shard, 4, batches=3, size=100, keys=1000) for shard in range(4)]
    sinks = [DeltaChangesSink(changes) for _ in shards]
    sessions = [cluster_session(spark_cluster) for _ in shards]
    try:
        land(sessions[0], sinks[0], shards[0][:1])  # the log exists (its first batch made it)
        with ThreadPoolExecutor(len(shards)) as writers:  # four workers, one shard each
            list(writers.map(land, sessions, sinks, [shards[0][1:], *shards[1:]]))
        # A worker died after its commit, before the checkpoint: the next owner lands the
        # batch again, cut elsewhere (a longer batch from the same first record).
        replay = change_batches(0, 4, batches=4, size=100, keys=1000)[1:3]
        land(sessions[0], DeltaChangesSink(changes), replay)
        landed = [batch for batches in shards for batch in batches]

        ran_to_end(apply_changes.start(sessions[0], changes, Merge(mirror), job))
        assert read_mirror(mirror) == expected_mirror(landed)
        more = change_batches(2, 4, batches=5, size=100, keys=1000)[3:]
        land(sessions[2], sinks[2], more)
        ran_to_end(apply_changes.start(sessions[0], changes, Merge(mirror), job))
        assert read_mirror(mirror) == expected_mirror(landed + more)
    finally:
        for session in sessions:
            session.stop()
    # Blind appends to partitions of their own: no writer ever lost a commit race.
    assert [sink.lost_races for sink in sinks] == [0, 0, 0, 0]


def test_the_bronze_job_runs_through_spark_connect_with_a_transform_the_server_lacks(
    connect: SparkSession, tmp_path: Path
) -> None:
    """The server's Python has no `clickstream` package: the transform travels with the
    job's function."""
    bronze, output = tmp_path / "bronze", tmp_path / "views"
    events = make_events(300, seed=3)
    records = [
        Record(data=event, partition_key=str(n), sequence_number=str(10**20 + n))
        for n, event in enumerate(events)
    ]
    lander = ProcessorHarness(BronzeProcessor(str(bronze), "clicks", max_records=100), "shard-0")
    lander.initialize()
    for read in range(0, 300, 100):
        lander.process(records[read : read + 100])
    lander.shutdown()
    landed = [pq.read_metadata(file).num_rows for file in bronze.glob("*/*.parquet")]
    assert sum(landed) == 300
    assert len(landed) > 1
    job = bronze_job.start(
        connect, str(bronze), str(output), str(tmp_path / "job"), page_views_per_minute
    )
    ran_to_end(job)
    assert read_page_views(str(output)) == expected_page_views(events)


SETTINGS = """
import logging
from streamconsumer.spark.session import spark_session
logging.basicConfig(level=logging.WARNING)
session = spark_session()
for key in ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone"):
    print(session.conf.get(key))
"""


def test_a_connect_session_takes_the_settings_a_session_may_change(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """In a process of its own, as a worker's: this one's default Connect session may
    be another server's."""
    env = {
        "SPARK_REMOTE": spark_cluster.connect_url,
        "SPARK_SHUFFLE_PARTITIONS": "3",
        CONF_ENV: "spark.cores.max 1\nspark.sql.session.timeZone America/Lima",
    }
    argv = ["env", "-u", "SPARK_CONNECT_MODE_ENABLED", sys.executable, "-c", SETTINGS]  # its own
    ran = subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["3", "America/Lima"]
    assert "spark.cores.max are the server's settings" in ran.stderr


DRIVER = """
import time
from streamconsumer.spark.session import spark_session
spark_session().range(1000).selectExpr("sum(id)").collect()
print("ran a job", flush=True)
time.sleep(600)
"""


def test_pods_driving_the_cluster_share_its_cores(
    spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    """Two workers as Spark drivers on the cluster (two task slots left beside the Connect
    server's): with spark.cores.max from their settings, both run at once."""
    env = {
        **daemon_env(tmp_path),
        "SPARK_MASTER": spark_cluster.master_url,
        "SPARK_DRIVER_MEMORY": "512m",
        CONF_ENV: "spark.cores.max 1\nspark.executor.memory 512m\n"
        "spark.driver.host 127.0.0.1\nspark.driver.bindAddress 127.0.0.1",
    }
    env.pop("PYTHONPATH")
    drivers = [
        # Not Spark Connect, whatever this process has set (a Connect session sets the mode).
        Server(
            f"driver-{n}",
            clean_argv([sys.executable, "-c", DRIVER]),
            tmp_path,
            env,
        )
        for n in range(2)
    ]

    def ran(driver: Server) -> bool:
        return "ran a job" in driver.log_path.read_text()

    try:
        for driver in drivers:
            driver.wait_until(functools.partial(ran, driver), 180, "running a job")
        ours = [app for app in spark_cluster.applications() if app["name"] == "streamconsumer"]
        assert [app["cores"] for app in ours] == [1, 1]
    finally:
        for driver in drivers:
            driver.stop()
