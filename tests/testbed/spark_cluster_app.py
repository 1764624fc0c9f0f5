"""The clickstream pipeline into Delta through Spark Connect, as a thin worker runs it, with
a death planted once: the first shard processor (a worker makes one per shard it takes)
to commit its second batch SIGKILLs its process right after that commit, before the
checkpoint. It first records which (shard, batch) it committed in DIE_ONCE_MARKER
(claimed atomically, so only one process dies, and written whole before it appears); the
shard's next owner replays that batch from the checkpoint, and the table's log then holds
the batch committed twice (`batch_commits`)."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from clickstream.pipeline import PageViewsOnSpark
from pyspark.sql import DataFrame

from streamconsumer.spark import BatchInfo, Sink

MARKER_ENV = "DIE_ONCE_MARKER"


@dataclass
class DiesOnceAfterCommit:
    sink: Sink
    marker: str
    writes: int = 0

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.sink.write(df, batch)
        self.writes += 1
        if self.writes == 2 and _first_to_claim(f"{self.marker}.claimed"):
            died = Path(f"{self.marker}.partial")
            died.write_text(json.dumps({"shard_id": batch.shard_id, "batch": batch.first_sequence}))
            died.rename(self.marker)
            os.kill(os.getpid(), signal.SIGKILL)


def _first_to_claim(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def batch_commits(table: Path, shard_id: str, batch: str) -> list[int]:
    """The versions of the Delta table whose writes (not compactions) added rows of this
    shard's batch, read from the log and the files it names, without a JVM."""
    versions = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        if info.get("operation") != "WRITE":
            continue
        added = [
            table / a["add"]["path"]
            for a in actions
            if "add" in a and a["add"].get("partitionValues", {}).get("shard_id") == shard_id
        ]
        if any(batch in pq.read_table(f, columns=["batch"])["batch"].to_pylist() for f in added):
            versions.append(int(commit.stem))
    return versions


class PageViewsDyingOnce(PageViewsOnSpark):
    def __init__(self) -> None:
        super().__init__()
        self.sink = DiesOnceAfterCommit(self.sink, os.environ[MARKER_ENV])
