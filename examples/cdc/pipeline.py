"""CDC: a DynamoDB table mirrored into a Delta table, on Spark in the worker.

Entrypoint `cdc.pipeline:MirrorToDelta` on a StreamConsumer whose source is the table's
stream (`spec.source.dynamodbStreams`, view type NEW_AND_OLD_IMAGES or NEW_IMAGE).
CDC_OUTPUT is the Delta table's path, CDC_BATCH_SECONDS how long a batch gathers.

Each change becomes one row: `key` (the item's key), `sequence` (its stream sequence
number, zero-padded to 40 digits so it sorts as a string), `deleted` (a REMOVE),
`item` (the new image, DynamoDB JSON, null for a REMOVE), `changed_at`. The sink MERGEs
them by key, newest sequence wins: an INSERT or MODIFY upserts, a REMOVE leaves a
tombstone, and a batch replayed after a crash (or any older change) changes nothing.
Changes of one item come in order on one shard lineage (DynamoDB Streams keeps an item's
changes in its partition's shards, and the operator starts a child shard only after its
parent is finished), so the newest sequence is the item's state. `read_mirror` gives the
live rows, as the table would hold them.

    kubectl apply -f examples/cdc/streamconsumer.yaml
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from streamconsumer.spark import BatchInfo, DeltaChangesSink, DeltaMergeSink, SparkBatchProcessor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SEQUENCE_DIGITS = 40  # DynamoDB Streams sequence numbers have 21 to 40 digits


def changes(records: DataFrame, batch: BatchInfo) -> DataFrame:
    """Stream records (their `data` is the raw DynamoDB Streams record as JSON) -> one
    change row each."""
    from pyspark.sql import functions as F

    data = F.col("data").cast("string")
    event = F.get_json_object(data, "$.eventName")
    return records.select(
        F.col("partition_key").alias("key"),
        F.lpad(F.get_json_object(data, "$.dynamodb.SequenceNumber"), SEQUENCE_DIGITS, "0").alias(
            "sequence"
        ),
        (event == F.lit("REMOVE")).alias("deleted"),
        F.when(event != F.lit("REMOVE"), F.get_json_object(data, "$.dynamodb.NewImage")).alias(
            "item"
        ),
        F.col("approximate_arrival_timestamp").alias("changed_at"),
    )


class MirrorToDelta(SparkBatchProcessor):
    def __init__(self) -> None:
        super().__init__(
            changes,
            DeltaMergeSink(
                os.environ.get("CDC_OUTPUT", "/data/mirror"), key="key", order="sequence"
            ),
            max_records=int(os.environ.get("CDC_BATCH_RECORDS", "10000")),
            max_wait=float(os.environ.get("CDC_BATCH_SECONDS", "5")),
        )


class LandChanges(SparkBatchProcessor):
    """For a table with many shards: the changes go to a change log (CDC_CHANGES) and
    the apply job keeps the mirror, alone:
        python -m streamconsumer.spark.apply_changes --changes "$CDC_CHANGES" \\
            --mirror /data/mirror --checkpoint /data/checkpoints/mirror"""

    def __init__(self) -> None:
        super().__init__(
            changes,
            DeltaChangesSink(os.environ.get("CDC_CHANGES", "/data/changes")),
            max_records=int(os.environ.get("CDC_BATCH_RECORDS", "10000")),
            max_wait=float(os.environ.get("CDC_BATCH_SECONDS", "5")),
        )


def delta_files(path: str) -> list[Path]:
    """The data files of a Delta table's latest version, from its transaction log (every
    commit's JSON, in order: adds and removes). Refuses what this small reader does not
    understand (deletion vectors), rather than giving a wrong answer."""
    log = Path(path) / "_delta_log"
    live: dict[str, Path] = {}
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                if action["add"].get("deletionVector"):
                    raise ValueError(f"{commit}: deletion vectors are not read here")
                live[action["add"]["path"]] = Path(path) / action["add"]["path"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sorted(live.values())


def read_mirror(path: str) -> dict[str, dict[str, Any]] | None:
    """Key -> item (DynamoDB JSON) for every live row of the mirror; None before the
    table exists. Read with pyarrow (no JVM)."""
    if not (Path(path) / "_delta_log").is_dir():
        return None
    rows: dict[str, dict[str, Any]] = {}
    for file in delta_files(path):
        table = pq.read_table(file, columns=["key", "deleted", "item"])
        for key, deleted, item in zip(
            table["key"].to_pylist(),
            table["deleted"].to_pylist(),
            table["item"].to_pylist(),
            strict=True,
        ):
            if key in rows:
                raise ValueError(f"key {key} twice in the mirror")
            rows[key] = {} if deleted else json.loads(item)
    return {key: item for key, item in rows.items() if item}
