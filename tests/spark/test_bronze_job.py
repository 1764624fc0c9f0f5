"""Bronze landing end to end on the real emulator and a real Spark: JVM-free landing with a
crash between a file's rename and its checkpoint, then the Structured Streaming job over
the landed files, run again after more records and once more with nothing new. The
per-minute page views equal what was produced: each event counted once."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from clickstream.events import expected_page_views, make_events
from clickstream.pipeline import page_views_per_minute, read_page_views
from pyspark.sql import SparkSession

from streamconsumer.processor import Record
from streamconsumer.sources.kinesis import KinesisSource, StreamRef
from streamconsumer.spark import BatchInfo, BronzeProcessor, bronze_job
from testbed.kinesis import KinesisEmulator, put_records
from testbed.shard_life import consume

pytestmark = pytest.mark.spark


class Crash(Exception):
    pass


class CrashAfterRename(BronzeProcessor):
    def __init__(self, path: str, stream: str, batch: int, crash_after: int | None) -> None:
        super().__init__(path, stream, max_records=batch, max_wait=3600)
        self.crash_after, self.commits = crash_after, 0

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        super().commit(records, batch)
        self.commits += 1
        if self.commits == self.crash_after:
            raise Crash


def land(
    source: KinesisSource,
    bronze: Path,
    stream: str,
    checkpoints: dict[str, list[str]],
    batch: int = 40,
    crash_after: int | None = None,
) -> None:
    """Every shard read to its tip by a fresh worker, resuming at its checkpoint."""
    for shard in (s.id for s in source.list_shards()):
        processor = CrashAfterRename(str(bronze), stream, batch, crash_after)
        with contextlib.suppress(Crash):
            consume(source, shard, processor, checkpoints.setdefault(shard, []))


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_bronze_job_counts_every_event_once(
    spark: SparkSession, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    client = kinesis.new_stream(stream_name, shards=4)
    source = KinesisSource(client, StreamRef(name=stream_name), max_records=25)
    bronze, output, job_checkpoint = tmp_path / "bronze", tmp_path / "views", tmp_path / "job"
    checkpoints: dict[str, list[str]] = {}

    def run_job() -> None:
        query = bronze_job.start(
            spark, str(bronze), str(output), str(job_checkpoint), page_views_per_minute
        )
        assert query.awaitTermination(300), "the job ended within 300 s"

    first = make_events(400, seed=1)
    put_records(client, stream_name, [(f"u{i}", e) for i, e in enumerate(first)])
    land(source, bronze, stream_name, checkpoints, crash_after=2)  # landed, not checkpointed
    run_job()  # the job has read the files that were never checkpointed
    # The next owners replay from the checkpoints and cut smaller batches: they must
    # recognise the landed files instead of landing those records again.
    land(source, bronze, stream_name, checkpoints, batch=15)
    run_job()
    assert read_page_views(str(output)) == expected_page_views(first)

    more = make_events(300, seed=2)
    put_records(client, stream_name, [(f"v{i}", e) for i, e in enumerate(more)])
    land(source, bronze, stream_name, checkpoints)
    run_job()
    run_job()  # nothing new: the job's checkpoint knows every file
    assert read_page_views(str(output)) == expected_page_views(first + more)
