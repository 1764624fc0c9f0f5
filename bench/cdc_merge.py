"""Change data from many shards into one Delta table, on a standalone Spark cluster through
its Spark Connect server (what thin workers use), each writer one shard's worker with a
Connect session of its own, batches of 1,000 changes over 10,000 keys:

1. the change log (DeltaChangesSink, one blind append per batch) with the apply job
   running beside the writers: batches a second until the mirror holds them all (the
   job has processed all that landed; the mirror is then compared, row for row), 4 writers
   against 1 in the same run (`cdc_merge_throughput_4_vs_1_writers`), and the commit
   races any writer lost (none reach the failure policy either way: they run again
   inside the sink);
2. for contrast, every writer MERGEing into the mirror (DeltaMergeSink): the same ratio
   and how many commits lost a race;
3. table health: a DeltaSink shard partition after 150 batches (auto-compaction on),
   its live files and how many of them a read of one batch touches by their statistics."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cdc.pipeline import delta_files, read_mirror
from pyspark.sql import SparkSession

from bench.results import record
from streamconsumer.spark import DeltaChangesSink, DeltaMergeSink, DeltaSink, apply_changes
from streamconsumer.spark.sinks import Merge
from testbed.cdc_changes import ChangeBatch, change_batches, expected_mirror
from testbed.spark_cluster import SparkCluster

KEYS = 10_000
BATCH = 1_000
BATCHES_PER_WRITER = 16
APPLY_INTERVAL = "5 seconds"  # the job's default is 10: each MERGE takes what has landed
MERGE_BATCHES_PER_WRITER = 4  # the direct MERGE is slow under races: a few batches tell
HEALTH_BATCHES = 150


@dataclass
class Run:
    writers: int
    batches: int
    seconds: float
    lost_races: int

    @property
    def per_second(self) -> float:
        return self.batches / self.seconds


def sessions(cluster: SparkCluster, count: int) -> list[SparkSession]:
    return [SparkSession.builder.remote(cluster.connect_url).create() for _ in range(count)]


def write_all(
    writers: list[SparkSession], sinks: list[DeltaChangesSink] | list[DeltaMergeSink], per: int
) -> list[ChangeBatch]:
    shards = [change_batches(n, len(writers), per, BATCH, KEYS) for n in range(len(writers))]

    def land(
        session: SparkSession, sink: DeltaChangesSink | DeltaMergeSink, batches: list[ChangeBatch]
    ) -> None:
        for batch in batches:
            sink.write(session.createDataFrame(batch.rows), batch.info)

    with ThreadPoolExecutor(len(writers)) as pool:
        list(pool.map(land, writers, sinks, shards))
    return [batch for batches in shards for batch in batches]


def change_log_run(cluster: SparkCluster, work: Path, writers: int) -> Run:
    changes, mirror = str(work / f"changes-{writers}"), str(work / f"mirror-{writers}")
    clients = sessions(cluster, writers + 1)
    applier, writing = clients[0], clients[1:]
    sinks = [DeltaChangesSink(changes) for _ in writing]
    try:
        # The log exists before the job starts (a consumer's first batch creates it).
        first = change_batches(0, writers, 1, BATCH, KEYS, seed=99)
        sinks[0].write(writing[0].createDataFrame(first[0].rows), first[0].info)
        job = apply_changes.start(
            applier,
            changes,
            Merge(mirror),
            str(work / f"job-{writers}"),
            once=False,
            interval=APPLY_INTERVAL,
        )
        started = time.perf_counter()
        landed = write_all(writing, sinks, BATCHES_PER_WRITER)
        job.processAllAvailable()  # the mirror has every landed change
        seconds = time.perf_counter() - started
        job.stop()
        assert read_mirror(mirror) == expected_mirror(first + landed), "the mirror diverged"
    finally:
        for client in clients:
            client.stop()
    return Run(writers, len(landed), seconds, sum(sink.lost_races for sink in sinks))


def merge_run(cluster: SparkCluster, work: Path, writers: int) -> Run:
    mirror = str(work / f"merged-{writers}")
    clients = sessions(cluster, writers)
    sinks = [DeltaMergeSink(mirror) for _ in clients]
    try:
        first = change_batches(0, writers, 1, BATCH, KEYS, seed=99)
        sinks[0].write(clients[0].createDataFrame(first[0].rows), first[0].info)
        started = time.perf_counter()
        landed = write_all(clients, sinks, MERGE_BATCHES_PER_WRITER)
        seconds = time.perf_counter() - started
        assert read_mirror(mirror) == expected_mirror(first + landed), "the direct MERGE diverged"
    finally:
        for client in clients:
            client.stop()
    return Run(writers, len(landed), seconds, sum(sink.lost_races for sink in sinks))


@dataclass
class Health:
    files: int
    files_read_for_one_batch: int


def table_health(cluster: SparkCluster, work: Path) -> Health:
    """One shard's DeltaSink partition after HEALTH_BATCHES batches."""
    path = work / "health"
    sink = DeltaSink(str(path))
    (client,) = sessions(cluster, 1)
    batches = change_batches(0, 1, HEALTH_BATCHES, 100, KEYS)
    try:
        for batch in batches:
            sink.write(client.createDataFrame(batch.rows), batch.info)
    finally:
        client.stop()
    files = delta_files(str(path))
    wanted = batches[HEALTH_BATCHES // 2].info.first_sequence
    return Health(len(files), sum(_may_hold(path, file, wanted) for file in files))


def _may_hold(table: Path, file: Path, batch: str) -> bool:
    """Whether a reader's data skipping must open `file` for `batch = <batch>`: its
    statistics' min and max of `batch`, from the table's log."""
    relative = str(file.relative_to(table))
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add["path"] == relative and add.get("stats"):
                stats = json.loads(add["stats"])
                low, high = stats["minValues"].get("batch"), stats["maxValues"].get("batch")
                return low is None or high is None or low <= batch <= high
    return True


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="streamconsumer-bench-cdc-"))
    cluster = SparkCluster.start(work / "cluster")
    try:
        log_runs = [change_log_run(cluster, work, writers) for writers in (1, 4)]
        merge_runs = [merge_run(cluster, work, writers) for writers in (1, 4)]
        health = table_health(cluster, work)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"change data into one Delta table, batches of {BATCH} changes over {KEYS} keys,")
    print("on a standalone Spark cluster through Spark Connect:")
    for name, runs in (("change log + apply job", log_runs), ("direct MERGE", merge_runs)):
        one, four = runs
        print(
            f"  {name:24} 1 writer {one.per_second:5.2f} batches/s, 4 writers "
            f"{four.per_second:5.2f} ({four.per_second / one.per_second:.2f}x); "
            f"lost commit races {one.lost_races} / {four.lost_races}"
        )
    print(
        f"  one shard's DeltaSink partition after {HEALTH_BATCHES} batches: {health.files} "
        f"files; a read of one batch opens {health.files_read_for_one_batch}"
    )
    one, four = log_runs
    record(
        {
            "cdc_merge_throughput_4_vs_1_writers": round(four.per_second / one.per_second, 3),
            "cdc_change_log_batches_per_second_1_writer": round(one.per_second, 3),
            "cdc_change_log_lost_races_4_writers": four.lost_races,
            "cdc_direct_merge_4_vs_1_writers": round(
                merge_runs[1].per_second / merge_runs[0].per_second, 3
            ),
            "cdc_direct_merge_lost_races_4_writers": merge_runs[1].lost_races,
            "delta_files_per_shard_after_150_batches": health.files,
            "delta_files_read_for_one_batch": health.files_read_for_one_batch,
        }
    )


if __name__ == "__main__":
    main()
