"""The Spark pipeline inside real worker pods (processes run by the local kubelet for a
Deployment the operator made), on the emulator, with a worker killed midway: per-minute
page views equal what was produced, in both modes (on a Spark cluster:
test_spark_cluster_pods.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from testbed.clickstream import ClickstreamRun
from testbed.scenario import Scenario
from testbed.waiting import wait_for

pytestmark = pytest.mark.spark


def kill_a_worker(scenario: Scenario) -> None:
    assert scenario.kubelet is not None
    scenario.kubelet.kill(scenario.kubelet.running()[0], signal.SIGKILL)


def test_spark_in_the_worker_counts_each_event_once(scenario: Scenario, tmp_path: Path) -> None:
    run = ClickstreamRun(scenario, "spark", tmp_path / "data")
    run.start(shards=4, replicas=2, lease_seconds=6.0)
    run.produce(400)
    # Two Spark JVMs start in the workers first: on a busy 2-core machine (the suite's
    # other workers) that alone has taken over 3 minutes. A hang guard, not a speed check.
    wait_for(lambda: run.counted() == run.expected(), 420, "the first page views")
    kill_a_worker(scenario)  # its shards replay from their checkpoints elsewhere
    run.produce(400)
    wait_for(lambda: run.counted() == run.expected(), 300, "page views after the kill")
    # The Deployment's replacement pod warms its Spark up, then joins and takes shards.
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 180, "2/2 balance again")
    assert sum((run.counted() or {}).values()) == 800


def test_bronze_landing_then_the_job_counts_each_event_once(
    scenario: Scenario, tmp_path: Path
) -> None:
    run = ClickstreamRun(scenario, "bronze", tmp_path / "data")
    run.start(shards=4, replicas=2, lease_seconds=6.0)
    run.produce(400)
    wait_for(lambda: run.landed() == 400, 120, "the first events landed")
    kill_a_worker(scenario)
    run.produce(400)
    wait_for(lambda: run.landed() == 800, 120, "every event landed once")
    job = run.run_bronze_job()
    assert job.returncode == 0, job.stderr[-3000:]
    assert run.counted() == run.expected()
    assert sum((run.counted() or {}).values()) == 800
