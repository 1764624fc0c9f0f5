"""The SparkSession a worker uses: in-process `local[N]` sized for a small pod, a driver on
a Spark cluster (`SPARK_MASTER=spark://…`), or Spark Connect when SPARK_REMOTE is set
(then the worker needs no JVM).

Settings, later ones winning: the small-pod defaults, what the sink needs (Delta), what
spark-submit was given (a job it launched), the processor's `spark_conf`, then
`STREAMCONSUMER_SPARK_CONF` (spark-defaults.conf lines, set at deploy time). A Spark
Connect server is configured on its side: of these, only the
settings Spark lets a session change (spark.sql.*) are sent to it."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from streamconsumer.models.pod_policy import SPARK_CONF_ENV, SPARK_JARS_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SparkConf = Mapping[str, str] | Callable[[], Mapping[str, str]]
"""Settings, or a function giving them: a sink's needs (Delta's jars) are only resolved
when this process starts a JVM of its own, never for a Spark Connect client."""

# A directory of jars fetched ahead of time (`python -m streamconsumer.spark.jars DIR`, as
# the Spark worker image does): pods then need neither Maven Central nor a writable cache.
JARS_DIR_ENV = SPARK_JARS_ENV  # the tenant may set it (models/pod_policy.py)
CONF_ENV = SPARK_CONF_ENV  # the tenant may set it too
MAX_CONF_LINES = 256

DEFAULT_MASTER = "local[2]"
"""The master when neither SPARK_MASTER, the settings, nor spark-submit names one."""

CLUSTER_CORES = "2"
"""`spark.cores.max` of a worker that drives a standalone cluster, unless set: Spark's
default gives the first application every core, and the next pod's waits forever."""


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


SETTING = re.compile(r"(?P<key>spark\.[A-Za-z0-9_.-]*[A-Za-z0-9_-])\s*[=:\s]\s*(?P<value>\S.*)")
"""A line of spark-defaults.conf as java.util.Properties reads it: the key ends at the
first whitespace, `=` or `:`, and one separator (with whitespace around it) is dropped."""


def deployed_conf() -> dict[str, str]:
    """STREAMCONSUMER_SPARK_CONF: lines of `spark.key value` (or `spark.key=value`), as
    in spark-defaults.conf; `#` starts a comment. Raises ValueError naming the bad line."""
    lines = [
        (number, line.strip())
        for number, line in enumerate(os.environ.get(CONF_ENV, "").split("\n"), 1)
        if line.strip() and not line.strip().startswith("#")
    ]
    if len(lines) > MAX_CONF_LINES:
        raise ValueError(f"{CONF_ENV} has {len(lines)} settings; at most {MAX_CONF_LINES}")
    settings = {}
    for number, line in lines:
        setting = SETTING.fullmatch(line)
        if setting is None or not _encodable(line):
            raise ValueError(
                f"{CONF_ENV}, line {number} ({line[:80]!r}): expected "
                "'spark.<name> <value>' or 'spark.<name>=<value>', in UTF-8"
            )
        settings[setting["key"]] = setting["value"].strip()
    return settings


def _encodable(line: str) -> bool:
    try:
        line.encode()
    except UnicodeEncodeError:  # bytes the environment held that are not UTF-8
        return False
    return True


# The in-process Spark Connect server has one client, in the same process: it listens on
# loopback, not on every interface of the pod. (Its port stays pyspark's 15002: outside
# pyspark's own tests the client of a "local" remote knows no other.)
LOCAL_CONNECT_SERVER = {"spark.connect.grpc.binding.address": "127.0.0.1"}


def spark_session(
    needs: SparkConf | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Spark Connect when SPARK_REMOTE is `sc://…`; otherwise a JVM in this process, or a
    local Connect server when SPARK_REMOTE is `local[N]`. `needs` is what the sink needs
    (e.g. delta_conf), `conf` the processor's settings; STREAMCONSUMER_SPARK_CONF
    overrides both.

    The master: SPARK_MASTER; else `spark.master` in those settings; else, in a process
    spark-submit launched, spark-submit's (`--master`, or its own default); else
    local[2]. Under spark-submit, its settings stand over the small-pod defaults and
    `needs` (give it Delta's jars: its JVM is running before this is called)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("streamconsumer")
    remote = os.environ.get("SPARK_REMOTE")
    if remote and remote.startswith("sc://"):
        return _connected(builder.remote(remote).getOrCreate(), {**(conf or {}), **deployed_conf()})
    submitted = {} if remote else submitted_conf()
    chosen = {**(conf or {}), **deployed_conf()}
    master = os.environ.get("SPARK_MASTER") or chosen.get("spark.master")
    master = master or submitted.get("spark.master") or DEFAULT_MASTER
    ours = small_pod_conf()
    if master.startswith("spark://"):
        ours["spark.cores.max"] = CLUSTER_CORES
    ours |= dict(needs() if callable(needs) else needs or {})
    # Under spark-submit, what it was given (--conf, --jars, --driver-memory) stands over
    # our defaults and the sink's needs: its JVM was started with them.
    settings = {key: value for key, value in ours.items() if key not in submitted}
    settings |= chosen
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
    return builder.master(master).getOrCreate()


def submitted_conf() -> dict[str, str]:
    """The settings spark-submit launched this process with (`spark-submit --master …
    job.py`): its JVM is already running (PYSPARK_GATEWAY_PORT), and what spark-submit was
    given (`--master`, `--conf`, spark-defaults.conf) is in that JVM's configuration.
    Empty when this process starts a JVM of its own."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM; starts none
    return dict(SparkConf().getAll())


def _connected(session: SparkSession, settings: Mapping[str, str]) -> SparkSession:
    """Sends a Connect session the settings a session may change; the rest (cores,
    memory, jars) belong to the server's own configuration, and are said to be ignored."""
    if partitions := os.environ.get("SPARK_SHUFFLE_PARTITIONS"):
        settings = {"spark.sql.shuffle.partitions": partitions, **settings}
    ignored = []
    for key, value in settings.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        else:
            ignored.append(key)
    if ignored:
        log.warning(
            "spark connect: %s are the server's settings, not a session's: ignored",
            ", ".join(sorted(ignored)),
        )
    return session


def is_connect(session: SparkSession) -> bool:
    return "connect" in type(session).__module__


def ship_by_value(session: SparkSession, *module_names: str) -> None:
    """On Spark Connect, foreachBatch functions run in the server's Python: the packages
    of these modules travel with the function (pickled by value) instead of being
    imported there, so the server needs neither the transform's package nor ours."""
    if not is_connect(session):
        return
    from pyspark import cloudpickle

    for name in module_names:
        package = sys.modules[name.partition(".")[0]]
        cloudpickle.register_pickle_by_value(package)  # type: ignore[no-untyped-call]
