"""Bronze landing without Spark: whatever the read sizes, batch sizes and crash points
(after a file is renamed into place, before its checkpoint), every record ends up in
exactly one landed file, and a landed file is never rewritten."""

from __future__ import annotations

import contextlib
import tempfile
from itertools import cycle
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.processor import Record
from streamconsumer.spark import BatchInfo, BronzeProcessor
from streamconsumer.testing import ProcessorHarness

SHARD = "shardId-000000000000"


class Crash(Exception):
    """The worker dies after the rename, before the checkpoint."""


class CrashingBronze(BronzeProcessor):
    """Also keeps what a streaming reader would see: every file as it was landed."""

    def __init__(
        self, path: str, max_records: int, crash_after: int | None, seen: list[list[str]]
    ) -> None:
        super().__init__(path, stream="clicks", max_records=max_records, max_wait=3600)
        self.crash_after = crash_after
        self.commits = 0
        self.seen = seen

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        super().commit(records, batch)
        landed = pq.read_table(self.file_for(batch.first_sequence))
        self.seen.append(landed["sequence_number"].to_pylist())
        self.commits += 1
        if self.commits == self.crash_after:
            raise Crash


def records(count: int) -> list[Record]:
    sequences = [str(49_000_000 + 7 * i) for i in range(count)]
    return [Record(b"%d" % i, "k", s, checkpoint_sequence=s) for i, s in enumerate(sequences)]


def live(
    root: str,
    stream: list[Record],
    checkpoints: list[str],
    reads: list[int],
    max_records: int,
    crash_after: int | None,
    seen: list[list[str]] | None = None,
    killed_after: int | None = None,
) -> None:
    """One worker's life on the shard: resume after the checkpoint, read to the end —
    unless a commit crashes (`crash_after` commits) or the process is killed between
    two calls (after `killed_after` reads)."""
    start = checkpoints[-1] if checkpoints else None
    pending = [r for r in stream if start is None or int(r.sequence_number) > int(start)]
    processor = CrashingBronze(root, max_records, crash_after, [] if seen is None else seen)
    harness = ProcessorHarness(processor, SHARD, start)
    harness.checkpoints = checkpoints  # what a crash leaves behind is what was stored
    harness.initialize()
    sizes = cycle(reads)
    calls = 0
    while pending:
        if calls == killed_after:
            return
        size = next(sizes)
        chunk, pending = pending[:size], pending[size:]
        harness.process(chunk)
        calls += 1
    harness.shutdown()


def landed(root: str) -> list[str]:
    files = sorted(Path(root, SHARD).glob("*.parquet"))
    return [s for f in files for s in pq.read_table(f)["sequence_number"].to_pylist()]


@settings(max_examples=100, deadline=None)
@given(
    count=st.integers(1, 80),
    reads=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=6), min_size=4, max_size=4),
    max_records=st.integers(1, 30),
    crashes=st.lists(
        st.tuples(st.integers(1, 4) | st.none(), st.integers(1, 6) | st.none()), max_size=3
    ),
)
def test_every_record_lands_exactly_once(
    count: int,
    reads: list[list[int]],
    max_records: int,
    crashes: list[tuple[int | None, int | None]],
) -> None:
    stream = records(count)
    checkpoints: list[str] = []
    seen: list[list[str]] = []
    with tempfile.TemporaryDirectory() as root:
        for life, (crash_after, killed_after) in enumerate([*crashes, (None, None)]):
            with contextlib.suppress(Crash):
                live(
                    root,
                    stream,
                    checkpoints,
                    reads[life % 4],
                    max_records,
                    crash_after,
                    seen,
                    killed_after,
                )
        expected = [r.sequence_number for r in stream]
        assert sorted(landed(root), key=int) == expected
        # What a reader of every landed file saw: each record once, no file landed twice.
        assert sorted((s for file in seen for s in file), key=int) == expected
        assert checkpoints[-1] == stream[-1].sequence_number
        assert not list(Path(root, SHARD).glob(".*")), "no temporary file left behind"


def test_a_landed_file_is_never_rewritten(tmp_path: Path) -> None:
    stream = records(10)
    checkpoints: list[str] = []
    with pytest.raises(Crash):
        live(str(tmp_path), stream, checkpoints, [10], max_records=10, crash_after=1)
    (first,) = Path(tmp_path, SHARD).glob("*.parquet")
    before = first.stat()
    live(str(tmp_path), stream, checkpoints, [3], max_records=3, crash_after=None)
    assert first.stat().st_mtime_ns == before.st_mtime_ns
    assert first.stat().st_ino == before.st_ino
    assert checkpoints[-1] == stream[-1].sequence_number, "recovered by checkpointing the file"
    assert list(Path(tmp_path, SHARD).glob("*.parquet")) == [first]
