"""DynamoDB Local (Maven Central `com.amazonaws:DynamoDBLocal`, Java) over real HTTP, and
boto3 helpers to shape tables in tests.

`make dynamodb-local` copies the server's jars and sqlite4java's native library into
tests/dynamodb/lib (tests/dynamodb/pom.xml pins the versions). DynamoDB Local listens on
every interface and has no option to change that, so it runs in a network namespace of
its own with only a loopback, reached through a socket bound to 127.0.0.1 here
(`testbed.nsloopback`): nothing but this machine's loopback can reach it. It keeps its
tables in memory and is stopped by PID (its process group) like every test server."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from testbed.processes import BRIEF_JVM_OPTIONS, LoopbackService, Server, stopped_on_failure

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

TESTS_DIR = Path(__file__).resolve().parents[1]
LIB_DIR = TESTS_DIR / "dynamodb" / "lib"
REGION = "us-east-1"
INNER_PORT = 8000  # inside its own namespace every port is free
MAIN_CLASS = "com.amazonaws.services.dynamodbv2.local.main.ServerRunner"


def _client_kwargs(endpoint_url: str, **config: Any) -> dict[str, Any]:
    return {
        "endpoint_url": endpoint_url,
        "region_name": REGION,
        "config": Config(retries={"max_attempts": 10, "mode": "standard"}, **config),
        # DynamoDB Local takes any credentials; boto3 only needs some to sign with.
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }


def unshare_argv() -> list[str]:
    """A new network namespace: as root directly, otherwise inside a user namespace."""
    if os.geteuid() == 0:
        return ["unshare", "--net", "--"]
    return ["unshare", "--user", "--map-root-user", "--net", "--"]


@dataclass(kw_only=True)
class DynamoDBLocal(LoopbackService):
    _client: DynamoDBClient | None = field(default=None, repr=False)
    _streams: DynamoDBStreamsClient | None = field(default=None, repr=False)

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = boto3.client("dynamodb", **_client_kwargs(self.endpoint_url))
        return self._client

    @property
    def streams(self) -> DynamoDBStreamsClient:
        if self._streams is None:
            self._streams = boto3.client("dynamodbstreams", **_client_kwargs(self.endpoint_url))
        return self._streams

    @classmethod
    def start(cls, workdir: Path | None = None) -> DynamoDBLocal:
        installed = LIB_DIR.glob("DynamoDBLocal-*.jar"), LIB_DIR.glob("libsqlite4java-*.so")
        if not all(any(found) for found in installed):
            raise RuntimeError(f"DynamoDB Local is not installed in {LIB_DIR}: make dynamodb-local")
        workdir = workdir or Path(tempfile.mkdtemp(prefix="streamconsumer-dynamodb-local-"))
        workdir.mkdir(parents=True, exist_ok=True)
        listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        port = int(listener.getsockname()[1])
        java = [
            "java",
            "-Xmx512m",
            *BRIEF_JVM_OPTIONS,
            f"-Dsqlite4java.library.path={LIB_DIR}",
            "-cp",
            f"{LIB_DIR}/*",
            MAIN_CLASS,
            "-inMemory",
            # One database whatever the credentials and region a client signs with (boto3's
            # default session keeps the first credentials it found for the process).
            "-sharedDb",
            "-port",
            str(INNER_PORT),
            "-disableTelemetry",
        ]
        argv = [
            *unshare_argv(),
            sys.executable,
            "-m",
            "testbed.nsloopback",
            str(listener.fileno()),
            str(INNER_PORT),
            "--",
            *java,
        ]
        env = {
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])
            )
        }
        try:
            server = Server(
                "dynamodb-local", argv, workdir, env, cwd=workdir, pass_fds=(listener.fileno(),)
            )
        finally:
            listener.close()  # the forwarder has its own copy
        local = cls(port=port, server=server, workdir=workdir)
        with stopped_on_failure(server.stop):
            server.wait_until(lambda: "TableNames" in local.client.list_tables(), 90, "ready")
        return local


def create_table(
    client: DynamoDBClient,
    table: str,
    sort_key: bool = False,
    view_type: str = "NEW_AND_OLD_IMAGES",
) -> str:
    """A pay-per-request table keyed by `pk` (string) and, with `sort_key`, `sk`
    (number), with a stream of `view_type`; returns the stream's ARN."""
    keys: list[Any] = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attributes: list[Any] = [{"AttributeName": "pk", "AttributeType": "S"}]
    if sort_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attributes.append({"AttributeName": "sk", "AttributeType": "N"})
    description = client.create_table(
        TableName=table,
        KeySchema=keys,
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view_type},  # type: ignore[typeddict-item]
    )["TableDescription"]
    wait_active(client, table)
    return str(description["LatestStreamArn"])


def wait_active(client: DynamoDBClient, table: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.describe_table(TableName=table)["Table"].get("TableStatus") == "ACTIVE":
            return
        time.sleep(0.05)
    raise TimeoutError(f"table {table} not ACTIVE after {timeout}s")


def scan_all(client: DynamoDBClient, table: str) -> list[dict[str, Any]]:
    """Every item of the table, typed (as DynamoDB returns it)."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**params)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
