"""The examples never let two Spark drivers commit to one Delta table on S3 without Delta's
DynamoDB log store (docs/spark.md, "Several writers on S3"): pods that drive Spark
themselves and write Delta to s3a:// set the log store in STREAMCONSUMER_SPARK_CONF, as
the worker reads it; thin workers write through one Connect server, which a rollout
replaces rather than doubles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streamconsumer.spark.session import CONF_ENV, deployed_conf

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
CONNECT_SERVER = EXAMPLES / "clickstream" / "spark" / "connect-server.yaml"


def manifests(kind: str) -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, doc)
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == kind
    ]


def env_of(consumer: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in consumer["spec"]["processor"].get("env", [])}


def writes_delta(consumer: dict[str, Any]) -> bool:
    entrypoint = consumer["spec"]["processor"]["entrypoint"]
    return entrypoint.startswith("cdc.") or env_of(consumer).get("CLICKSTREAM_FORMAT") == "delta"


def test_spark_driving_pods_on_s3_commit_through_the_log_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked = set()
    for path, consumer in manifests("StreamConsumer"):
        env = env_of(consumer)
        on_s3 = any(value.startswith("s3a://") for value in env.values())
        if not (writes_delta(consumer) and on_s3) or "SPARK_REMOTE" in env:
            continue
        monkeypatch.setenv(CONF_ENV, env.get(CONF_ENV, ""))
        settings = deployed_conf()
        assert settings.get("spark.delta.logStore.s3a.impl") == LOG_STORE, path
        prefix = f"spark.{LOG_STORE}.ddb"
        assert settings.get(f"{prefix}.tableName"), path
        assert settings.get(f"{prefix}.region"), path
        checked.add(path.relative_to(EXAMPLES).as_posix())
    assert checked == {"cdc/streamconsumer.yaml", "clickstream/spark/streamconsumer-spark.yaml"}


def test_thin_workers_write_through_one_connect_server() -> None:
    thin = [
        path
        for path, consumer in manifests("StreamConsumer")
        if writes_delta(consumer) and "SPARK_REMOTE" in env_of(consumer)
    ]
    assert thin, "no thin-worker example"
    ((_, server),) = [(p, d) for p, d in manifests("Deployment") if p == CONNECT_SERVER]
    assert server["spec"]["replicas"] == 1
    assert server["spec"]["strategy"] == {"type": "Recreate"}
