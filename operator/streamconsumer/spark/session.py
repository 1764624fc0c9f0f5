"""The SparkSession a worker uses: in-process `local[N]` sized for a small pod, or Spark
Connect when SPARK_REMOTE is set (then the worker needs no JVM)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from streamconsumer.models.pod_policy import SPARK_JARS_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A directory of jars fetched ahead of time (`python -m streamconsumer.spark.jars DIR`, as
# the Spark worker image does): pods then need neither Maven Central nor a writable cache.
JARS_DIR_ENV = SPARK_JARS_ENV  # the tenant may set it (models/pod_policy.py)


def delta_conf() -> dict[str, str]:
    """The settings Delta Lake needs: its jars (from JARS_DIR_ENV, else fetched from
    Maven Central on first use and cached), its SQL extension and catalog."""
    return {
        **_jars(),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # The default (50) spreads reading a table's log over 50 tasks: slow on 2 cores.
        "spark.databricks.delta.snapshotPartitions": "2",
    }


def _jars() -> dict[str, str]:
    from streamconsumer.spark import jars as delta_jars

    directory = os.environ.get(JARS_DIR_ENV) or str(delta_jars.cached())
    jars = sorted(Path(directory).glob("*.jar"))
    if not jars:
        raise ValueError(
            f"{JARS_DIR_ENV}={directory} holds no jars; "
            f"fetch them with: python -m streamconsumer.spark.jars {directory}"
        )
    return {"spark.jars": ",".join(str(jar) for jar in jars)}


def small_pod_conf() -> dict[str, str]:
    """What worked in a 2-core pod: 1g driver, few shuffle partitions, no UI."""
    return {
        "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "1g"),
        "spark.sql.shuffle.partitions": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "4"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }


# The in-process Spark Connect server has one client, in the same process: it listens on
# loopback, not on every interface of the pod. (Its port stays pyspark's 15002: outside
# pyspark's own tests the client of a "local" remote knows no other.)
LOCAL_CONNECT_SERVER = {"spark.connect.grpc.binding.address": "127.0.0.1"}


def spark_session(conf: Mapping[str, str] | None = None) -> SparkSession:
    """Spark Connect when SPARK_REMOTE is set, otherwise `local[N]` (SPARK_MASTER, default
    local[2]). `conf` adds what a sink needs (e.g. delta_conf()). A remote `sc://` server is
    configured on its side, so static settings are not sent to it."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("streamconsumer")
    remote = os.environ.get("SPARK_REMOTE")
    if remote and remote.startswith("sc://"):
        return builder.remote(remote).getOrCreate()
    settings = {**small_pod_conf(), **(conf or {})}
    if remote:  # "local[N]": pyspark starts a Spark Connect server in this process's JVM
        settings |= LOCAL_CONNECT_SERVER
    for key, value in settings.items():
        builder = builder.config(key, value)
    if remote:
        with warnings.catch_warnings():
            # The server got the static settings at start; the client re-sending them as
            # session settings only produces CANNOT_MODIFY_(STATIC_)CONFIG warnings.
            warnings.filterwarnings("ignore", message=r".*\[CANNOT_MODIFY_(STATIC_)?CONFIG\]")
            return builder.remote(remote).getOrCreate()
    return builder.master(os.environ.get("SPARK_MASTER", "local[2]")).getOrCreate()
