"""A standalone Spark cluster on loopback, from pyspark's own distribution: a master, workers
(`spark-class org.apache.spark.deploy.master.Master` / `…worker.Worker`) and a Spark
Connect server driving applications on it with Delta Lake configured, as a team runs one
beside its consumers. Every process is stopped by PID (its process group).

The Connect server's Python (for foreachBatch functions and UDFs) is this interpreter,
with no PYTHONPATH of the tests': what a client's code needs must reach the server with
the client's request, as it must in a real cluster."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from streamconsumer.spark.session import delta_conf
from testbed.processes import BRIEF_JVM_OPTIONS, Server, free_port, stopped_on_failure

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
WORKER_CORES = 3  # task slots, not CPUs: the Connect server takes CONNECT_CORES of them
CONNECT_CORES = 4
CONNECT_MEMORY = "1g"
START_SECONDS = 120.0


# What a Spark Connect session in this process leaves in its environment: a process of
# the cluster (or a driver) that inherited them would take itself for a Connect client.
CONNECT_CLIENT_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def clean_argv(argv: list[str]) -> list[str]:
    """`argv` run without this process' Spark Connect settings (env -u)."""
    unset = [arg for name in CONNECT_CLIENT_ENV for arg in ("-u", name)]
    return ["env", *unset, *argv]


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def daemon_env(scratch: Path) -> dict[str, str]:
    """Loopback only, small daemons, scratch in the test's directory; no PYTHONPATH."""
    options = " ".join((f"-Djava.io.tmpdir={scratch}", *BRIEF_JVM_OPTIONS))
    env = {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(scratch),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": options,
        "SPARK_LOG_DIR": str(scratch),
        "SPARK_CONF_DIR": str(scratch),  # nothing of the machine's spark-defaults.conf
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": "",
    }
    return env


@dataclass
class SparkCluster:
    master_url: str
    connect_url: str
    ui_port: int
    servers: list[Server] = field(default_factory=list)

    @classmethod
    def start(cls, workdir: Path, workers: int = 2) -> SparkCluster:
        scratch = workdir / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        env = daemon_env(scratch)
        spark_class = str(spark_home() / "bin" / "spark-class")
        master_port, ui_port, connect_port = free_port(), free_port(), free_port()
        cluster = cls(f"spark://127.0.0.1:{master_port}", f"sc://127.0.0.1:{connect_port}", ui_port)
        with stopped_on_failure(cluster.stop):
            master = Server(
                "spark-master",
                clean_argv(
                    [
                        spark_class,
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(master_port),
                        "--webui-port",
                        str(ui_port),
                    ]
                ),
                workdir,
                env,
            )
            cluster.servers.append(master)
            master.wait_until(lambda: cluster.alive_workers() >= 0, START_SECONDS, "serving")
            for index in range(workers):
                cluster.servers.append(
                    Server(
                        f"spark-worker-{index}",
                        clean_argv(
                            [
                                spark_class,
                                "org.apache.spark.deploy.worker.Worker",
                                cluster.master_url,
                                "--host",
                                "127.0.0.1",
                                "--cores",
                                str(WORKER_CORES),
                                "--memory",
                                "2g",
                                "--webui-port",
                                str(free_port()),
                                "--work-dir",
                                str(workdir / f"worker-{index}"),
                            ]
                        ),
                        workdir,
                        env,
                    )
                )
            master.wait_until(
                lambda: cluster.alive_workers() == workers, START_SECONDS, "joined by its workers"
            )
            # Spark's launcher sizes a Connect server as a daemon (SPARK_DAEMON_MEMORY),
            # whatever spark.driver.memory says.
            connect = Server(
                "spark-connect",
                clean_argv(cluster.connect_server_argv(connect_port)),
                workdir,
                env | {"SPARK_DAEMON_MEMORY": CONNECT_MEMORY},
            )
            cluster.servers.append(connect)
            connect.wait_until(lambda: _listening(connect_port), START_SECONDS, "serving")
        return cluster

    def connect_server_argv(self, port: int) -> list[str]:
        """spark-submit of the Connect server onto the cluster, with Delta's jars (shipped
        to its executors by spark-submit) and extensions: the recipe in docs/spark.md."""
        settings = {
            **delta_conf(),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": "768m",
            "spark.cores.max": str(CONNECT_CORES),
            # Its clients' jobs share the executors instead of queueing behind each other.
            "spark.scheduler.mode": "FAIR",
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.executor.extraJavaOptions": " ".join(BRIEF_JVM_OPTIONS),
        }
        jars = settings.pop("spark.jars")
        argv = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            CONNECT_SERVER_CLASS,
            "--master",
            self.master_url,
            "--jars",
            jars,
            "--driver-java-options",
            " ".join(BRIEF_JVM_OPTIONS),
        ]
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, "spark-internal"]

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return int(json.load(answer)["aliveworkers"])

    def applications(self) -> list[dict[str, object]]:
        """The master's running applications: name, cores, state."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return list(json.load(answer)["activeapps"])

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def without_java_env() -> dict[str, str]:
    """PATH and JAVA_HOME of a thin worker: no `java` anywhere it would look."""
    python_bin = str(Path(sys.executable).parent)
    return {"PATH": python_bin, "JAVA_HOME": os.devnull}
