"""The clickstream example running for real: worker pods with the Spark pipeline (Spark in
the worker, or bronze landing plus the Structured Streaming job as a separate process),
fed with clickstream events. Used by the end-to-end test and by `make demo`."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from cdc.pipeline import delta_files
from clickstream.events import expected_page_views, make_events
from clickstream.pipeline import read_page_views

from testbed.kinesis import put_records
from testbed.scenario import TESTS_DIR, Scenario

EXAMPLES_DIR = TESTS_DIR.parent / "examples"
ENTRYPOINTS = {
    "spark": "clickstream.pipeline:PageViewsOnSpark",
    "bronze": "clickstream.pipeline:LandInBronze",
    # Thin workers into Delta through Spark Connect, one of them dying once after a commit.
    "cluster": "testbed.spark_cluster_app:PageViewsDyingOnce",
}
PYTHONPATH = f"{TESTS_DIR}{os.pathsep}{EXAMPLES_DIR}"


class ClickstreamRun:
    def __init__(self, scenario: Scenario, mode: str, workdir: Path) -> None:
        if mode not in ENTRYPOINTS:
            raise ValueError(f"mode must be one of {', '.join(ENTRYPOINTS)}, not {mode!r}")
        self.scenario = scenario
        self.mode = mode
        self.output = workdir / "page-views"
        self.bronze = workdir / "bronze"
        self.job_checkpoint = workdir / "bronze-job-checkpoint"
        self.events: list[bytes] = []
        self._seeds = itertools.count(1)

    def start(
        self, shards: int, replicas: int, lease_seconds: float, env: dict[str, str] | None = None
    ) -> None:
        self.scenario.start(
            shards=shards,
            replicas=replicas,
            lease_seconds=lease_seconds,
            processor=ENTRYPOINTS[self.mode],
            processor_env={
                # The caller's PYTHONPATH after ours: a worktree's workers run its code, not
                # the checkout the virtualenv was installed from (as testbed/scenario.py).
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [PYTHONPATH, os.environ.get("PYTHONPATH")])
                ),
                "CLICKSTREAM_OUTPUT": str(self.output),
                "CLICKSTREAM_BRONZE": str(self.bronze),
                "CLICKSTREAM_BATCH_SECONDS": "2",
                "SPARK_DRIVER_MEMORY": "512m",
                **(env or {}),
            },
        )

    def produce(self, count: int) -> None:
        events = make_events(count, seed=next(self._seeds))
        put_records(
            self.scenario.kinesis.client,
            self.scenario.stream,
            [(f"{len(self.events) + i}", event) for i, event in enumerate(events)],
        )
        self.events.extend(events)

    def expected(self) -> Counter[tuple[str, str]]:
        return expected_page_views(self.events)

    def counted(self) -> Counter[tuple[str, str]] | None:
        """The page views so far; None while a batch directory is being replaced (plain
        Parquet has no snapshot isolation: a reader may catch a replay mid-way)."""
        try:
            if self.mode == "cluster":
                return read_delta_page_views(self.output)
            return read_page_views(str(self.output))
        except (FileNotFoundError, pa.ArrowInvalid):
            return None

    def landed(self) -> int:
        """Records in the bronze files so far (bronze mode)."""
        return sum(self.by_shard().values()) if self.mode == "bronze" else 0

    def by_shard(self) -> Counter[str]:
        """Per shard: events landed (bronze) or counted in the page views (spark)."""
        done: Counter[str] = Counter()
        if self.mode == "bronze":
            for path in self.bronze.glob("*/*.parquet"):
                done[path.parent.name] += pq.read_metadata(path).num_rows
            return done
        try:
            table = ds.dataset(self.output, format="parquet", partitioning="hive").to_table(
                columns=["shard", "views"]
            )
        except (FileNotFoundError, pa.ArrowInvalid):
            return done  # nothing yet, or a batch directory mid-replacement
        for shard, views in zip(
            table["shard"].to_pylist(), table["views"].to_pylist(), strict=True
        ):
            done[shard] += views
        return done

    def run_bronze_job(self) -> subprocess.CompletedProcess[str]:
        """The Structured Streaming job over what has landed, once, as its own process."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "streamconsumer.spark.bronze_job",
                "--bronze",
                str(self.bronze),
                "--output",
                str(self.output),
                "--checkpoint",
                str(self.job_checkpoint),
                "--transform",
                "clickstream.pipeline:page_views_per_minute",
                "--once",
            ],
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def read_delta_page_views(table: Path) -> Counter[tuple[str, str]]:
    """The page views in a Delta table's latest version, read from its log without a JVM."""
    views: Counter[tuple[str, str]] = Counter()
    if not (table / "_delta_log").is_dir():
        return views
    for file in delta_files(str(table)):
        rows = pq.read_table(file, columns=["minute", "page", "views"]).to_pylist()
        for row in rows:
            views[(row["minute"], row["page"])] += row["views"]
    return views
