"""KCL 3.1.3 through amazon-kclpy, as a Python team runs it, against the same kinesalite:

- DynamoDB Local (KCL's lease table needs a global secondary index) in a network namespace
  of its own with only a loopback, since it listens on every interface; KCL reaches it
  through bench/peers/forward.py on 127.0.0.1;
- each KCL worker: a MultiLangDaemon JVM with kclpy's jars, our HTTP/1.1 KinesisClientUtil
  ahead of KCL's (kinesalite speaks no HTTP/2), `-Daws.cborEnabled=false`, and one Python
  child per shard running bench/peers/kcl_app.py (or the kclpy processor a caller names:
  tests/e2e/test_kcl_migration.py runs its own).

Every process is a testbed Server: its own process group, stopped by PID.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import boto3

from bench.peers.install import DYNAMODB_LOCAL, H1_CLASSES, KCL_JARS, KCLPY
from testbed.kinesis import REGION
from testbed.netns import wait_until_unshared
from testbed.processes import Server, free_port, stopped_on_failure

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The benchmark's record processor (bench/peers/kcl_app.py), as the daemon runs it.
PEERS_APP = f"{sys.executable} {HERE / 'kcl_app.py'}"
CREDENTIALS = {
    # The emulators take any credentials; KCL's DefaultCredentialsProvider reads these.
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": REGION,
}

# KCL's own defaults for the settings we change in the "tuned" runs (KCL 3.1.3 sources):
# failoverTimeMillis 10000, shardSyncIntervalMillis 60000, idleTimeBetweenReadsInMillis
# 1500, maxRecords 10000, parentShardPollIntervalMillis 10000,
# leaseAssignmentIntervalMillis 2 x failoverTimeMillis.
ALWAYS = {
    "AwsCredentialsProvider": "DefaultCredentialsProvider",
    "regionName": REGION,
    "metricsLevel": "NONE",  # no CloudWatch calls
    "retrievalMode": "POLLING",  # the default is enhanced fan-out, which kinesalite lacks
    "disableWorkerMetrics": "true",
    "initialPositionInStream": "TRIM_HORIZON",
    "processingLanguage": "python/3.11",
}


def tuned(lease_ms: int, idle_ms: int, max_records: int) -> dict[str, str]:
    """Settings matching our worker's: the same lease duration, poll interval and batch
    size, leases assigned every third of a lease (as often as our workers heartbeat, which
    is when our operator assigns), shard discovery about as often as our operator's (1 s)."""
    return {
        "failoverTimeMillis": str(lease_ms),
        "leaseAssignmentIntervalMillis": str(lease_ms // 3),
        "idleTimeBetweenReadsInMillis": str(idle_ms),
        "maxRecords": str(max_records),
        "shardSyncIntervalMillis": "1000",
        "parentShardPollIntervalMillis": "1000",
    }


class LoopbackNamespace:
    """A network namespace with only `lo` (up), held by a `sleep` of ours; freed by the
    kernel when the holder and every process entered into it are gone."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.holder = Server(
            "netns-holder",
            ["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep infinity"],
            workdir,
        )
        with stopped_on_failure(self.holder.stop):
            wait_until_unshared(self.holder)

    @property
    def path(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def enter(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", f"--target={self.holder.pid}", "--net", "--", *argv]

    def stop(self) -> None:
        self.holder.stop()


@dataclass
class DynamoDBLocal:
    server: Server
    forwarder: Server
    port: int  # on 127.0.0.1, through the forwarder

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, netns: LoopbackNamespace, workdir: Path) -> DynamoDBLocal:
        workdir.mkdir(parents=True, exist_ok=True)
        inside = free_port()  # any port: nothing else lives in that namespace
        argv = [
            "java",
            f"-Dsqlite4java.library.path={DYNAMODB_LOCAL}",
            "-cp",
            f"{DYNAMODB_LOCAL}/*",
            "com.amazonaws.services.dynamodbv2.local.main.ServerRunner",
            "-inMemory",
            "-port",
            str(inside),
        ]
        # cwd: it writes a dynamodb-local-metadata.json there
        server = Server("dynamodb-local", netns.enter(argv), workdir, cwd=workdir)
        port = free_port()
        with stopped_on_failure(server.stop):
            forward = [sys.executable, "-m", "bench.peers.forward", netns.path, str(port)]
            forwarder = Server(
                "dynamodb-forward",
                [*forward, str(inside)],
                workdir,
                env={"PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}"},
            )
        local = cls(server, forwarder, port)
        client = boto3.client(
            "dynamodb",
            endpoint_url=local.endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        with stopped_on_failure(local.stop):
            server.wait_until(lambda: "TableNames" in client.list_tables(), 60, "serving")
        return local

    def stop(self) -> None:
        self.forwarder.stop()
        self.server.stop()


class KclWorker:
    """One MultiLangDaemon (a JVM) and the Python children it starts, one per shard."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        *,
        stream: str,
        application: str,
        kinesis_url: str,
        dynamodb_url: str,
        settings: dict[str, str],
        env: dict[str, str],
        executable: str = PEERS_APP,
        jvm_options: Sequence[str] = (),
    ) -> None:
        """`executable`: the command (split at spaces) the daemon runs per shard, with
        `env` (kclpy ahead of its PYTHONPATH); `jvm_options`: the JVM's, before KCL's."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        properties = {
            "executableName": executable,
            "streamName": stream,
            "applicationName": application,
            "kinesisEndpoint": kinesis_url,
            "dynamoDBEndpoint": dynamodb_url,
            "workerIdentifier": name,
            **ALWAYS,
            **settings,
        }
        path = workdir / f"{name}.properties"
        path.write_text("".join(f"{k} = {v}\n" for k, v in properties.items()))
        argv = [
            "java",
            *jvm_options,
            "-Daws.cborEnabled=false",  # kinesalite answers GetRecords in JSON only
            "-cp",
            f"{H1_CLASSES}:{KCL_JARS}/*",  # our HTTP/1.1 KinesisClientUtil first
            "software.amazon.kinesis.multilang.MultiLangDaemon",
            "--properties-file",
            str(path),
        ]
        python_path = os.pathsep.join(filter(None, [str(KCLPY), env.get("PYTHONPATH")]))
        self.server = Server(
            name, argv, workdir, {**CREDENTIALS, **env, "PYTHONPATH": python_path}, cwd=workdir
        )

    @property
    def pid(self) -> int:
        return self.server.pid

    def alive(self) -> bool:
        return self.server.process.poll() is None

    def stop(self) -> None:
        self.server.stop(timeout=20)
