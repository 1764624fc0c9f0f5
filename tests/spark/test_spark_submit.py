"""A job spark-submit launched (the bronze job, the apply job as a cluster driver) runs
where spark-submit sent it: spark_session() keeps spark-submit's `--master` and `--conf`
instead of its own local[2] and small-pod defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.processes import BRIEF_JVM_OPTIONS
from testbed.spark_cluster import clean_argv, daemon_env, spark_home

pytestmark = pytest.mark.spark

JOB = """
from streamconsumer.spark.session import spark_session
session = spark_session()
conf = session.sparkContext.getConf()
print("master", conf.get("spark.master"), conf.get("spark.sql.shuffle.partitions"))
session.stop()
"""


def test_a_spark_submitted_job_runs_on_spark_submits_master(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    argv = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        "local[1]",
        "--conf",
        "spark.sql.shuffle.partitions=7",
        "--driver-java-options",
        " ".join(BRIEF_JVM_OPTIONS),
        str(job),
    ]
    env = daemon_env(tmp_path) | {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    ran = subprocess.run(
        clean_argv(argv), env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "master local[1] 7" in ran.stdout.splitlines(), ran.stdout
