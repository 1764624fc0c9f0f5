"""Kinesis emulators over real HTTP, and boto3 helpers to shape streams in tests.

- `kinesis-local` (kinesis-mock): faithful — lineage, ChildShards at shard end,
  UpdateShardCount, MillisBehindLatest, consumers, realistic CREATING/UPDATING delays —
  but slow (hundreds of writes per second). The default for behaviour tests.
- `kinesalite`: fast and strict, but no ChildShards, no UpdateShardCount, no consumers,
  and MillisBehindLatest is always 0. For throughput benchmarks and cross-checks.

Both are started with `--require loopback.js`, which pins their listeners to 127.0.0.1.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import boto3
from botocore.config import Config

from streamconsumer.sources.fast_decode import fast_get_records
from testbed.processes import LoopbackService, Server, free_port, stopped_on_failure

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import ShardTypeDef

EmulatorKind = Literal["kinesis-local", "kinesalite"]
EMULATOR_DIR = Path(__file__).resolve().parents[1] / "kinesis"
REGION = "us-east-1"


def kinesis_client(endpoint_url: str, **config: Any) -> KinesisClient:
    """A client that decodes GetRecords as the worker's do (`fast_get_records`)."""
    client = boto3.client(
        "kinesis",
        endpoint_url=endpoint_url,
        region_name=REGION,
        config=Config(retries={"max_attempts": 10, "mode": "standard"}, **config),
        # The emulators accept any credentials; boto3 only needs some to sign with.
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    fast_get_records(client)
    return client


@dataclass(kw_only=True)
class KinesisEmulator(LoopbackService):
    kind: EmulatorKind
    _client: KinesisClient | None = field(default=None, repr=False)

    @property
    def client(self) -> KinesisClient:
        if self._client is None:
            self._client = kinesis_client(self.endpoint_url)
        return self._client

    def new_stream(self, name: str, shards: int) -> KinesisClient:
        """Creates the stream `name` with `shards` shards, active; the client to use it."""
        create_stream(self.client, name, shards)
        return self.client

    @classmethod
    def start(
        cls,
        kind: EmulatorKind = "kinesis-local",
        workdir: Path | None = None,
        operation_delay_ms: int = 500,
        *,
        enter: Callable[[Sequence[str]], list[str]] | None = None,
        host: str = "127.0.0.1",
        shard_limit: int = 2000,
    ) -> KinesisEmulator:
        """Starts an in-memory emulator. `operation_delay_ms` is how long a stream stays
        CREATING / UPDATING after a create, split, merge or shard-count change;
        `shard_limit`, the open shards of all streams at most (AWS' account limit).

        With `enter` (e.g. a real node's namespaces: testbed.netns), it runs through that
        command prefix, listening on every address there, and is reached at `host`."""
        workdir = workdir or Path(tempfile.mkdtemp(prefix=f"streamconsumer-{kind}-"))
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        node = ["node"] if enter else ["node", "--require", str(EMULATOR_DIR / "loopback.js")]
        if kind == "kinesis-local":
            package = EMULATOR_DIR / "node_modules" / "kinesis-local"
            delay = f"{operation_delay_ms}ms"
            env = {
                "KINESIS_MOCK_PLAIN_PORT": str(port),
                "KINESIS_MOCK_TLS_PORT": str(free_port()),
                "KINESIS_MOCK_CERT_PATH": str(package / "server.json"),
                "AWS_REGION": REGION,
                "SHARD_LIMIT": str(shard_limit),
                "LOG_LEVEL": "WARN",
                **{
                    name: delay
                    for name in (
                        "CREATE_STREAM_DURATION",
                        "DELETE_STREAM_DURATION",
                        "MERGE_SHARDS_DURATION",
                        "SPLIT_SHARD_DURATION",
                        "UPDATE_SHARD_COUNT_DURATION",
                        "REGISTER_STREAM_CONSUMER_DURATION",
                        "DEREGISTER_STREAM_CONSUMER_DURATION",
                    )
                },
            }
            argv = [*node, str(package / "main.js")]
            server = Server(kind, enter(argv) if enter else argv, workdir, env, cwd=workdir)
        else:
            delay = str(operation_delay_ms)
            argv = [
                *node,
                # Our wrapper pins loopback; inside a node's namespace, kinesalite's own CLI.
                str(
                    EMULATOR_DIR / ("node_modules/kinesalite/cli.js" if enter else "kinesalite.js")
                ),
                f"--port={port}",
                f"--createStreamMs={delay}",
                f"--deleteStreamMs={delay}",
                f"--updateStreamMs={delay}",
                f"--shardLimit={shard_limit}",
            ]
            server = Server(kind, enter(argv) if enter else argv, workdir, cwd=workdir)
        emulator = cls(kind=kind, port=port, server=server, workdir=workdir, host=host)
        with stopped_on_failure(server.stop):
            server.wait_until(lambda: "StreamNames" in emulator.client.list_streams(), 60, "ready")
        return emulator


def wait_active(client: KinesisClient, stream: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        summary = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return
        time.sleep(0.05)
    raise TimeoutError(f"stream {stream} not ACTIVE after {timeout}s")


def create_stream(client: KinesisClient, stream: str, shards: int) -> None:
    client.create_stream(StreamName=stream, ShardCount=shards)
    wait_active(client, stream)


def delete_stream(client: KinesisClient, stream: str, timeout: float = 30.0) -> None:
    """Deletes the stream and waits until its name is free again."""
    client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
    deadline = time.monotonic() + timeout
    while stream in client.list_streams()["StreamNames"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream {stream} not deleted after {timeout}s")
        time.sleep(0.05)


def list_all_shards(client: KinesisClient, stream: str) -> list[ShardTypeDef]:
    shards: list[ShardTypeDef] = []
    response = client.list_shards(StreamName=stream)
    shards.extend(response["Shards"])
    while token := response.get("NextToken"):
        response = client.list_shards(NextToken=token)
        shards.extend(response["Shards"])
    return shards


def put_records(
    client: KinesisClient, stream: str, records: Iterable[tuple[str, bytes]]
) -> list[tuple[str, str]]:
    """Puts (partition key, data) pairs in batches of 500; returns (shard id, sequence number)
    for each record, in order. Retries records the emulator throttles."""
    placed: list[tuple[str, str]] = []
    batch = list(records)
    for start in range(0, len(batch), 500):
        pending = batch[start : start + 500]
        results: list[tuple[str, str] | None] = [None] * len(pending)
        todo = list(range(len(pending)))
        while todo:
            response = client.put_records(
                StreamName=stream,
                Records=[{"PartitionKey": pending[i][0], "Data": pending[i][1]} for i in todo],
            )
            retry = []
            for index, entry in zip(todo, response["Records"], strict=True):
                if "SequenceNumber" in entry:
                    results[index] = (entry["ShardId"], entry["SequenceNumber"])
                else:
                    retry.append(index)
            todo = retry
            if todo:
                time.sleep(0.1)
        placed.extend(r for r in results if r is not None)
    return placed


def split_shard_in_half(client: KinesisClient, stream: str, shard_id: str) -> None:
    shard = next(s for s in list_all_shards(client, stream) if s["ShardId"] == shard_id)
    low = int(shard["HashKeyRange"]["StartingHashKey"])
    high = int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(
        StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2 + 1)
    )
    wait_active(client, stream)


def merge_shards(client: KinesisClient, stream: str, shard_id: str, adjacent_id: str) -> None:
    client.merge_shards(StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_id)
    wait_active(client, stream)
