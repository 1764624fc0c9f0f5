"""Bronze landing: workers stay JVM-free and land raw batches as Parquet files; a Spark
Structured Streaming job (bronze_job.py) processes them later, exactly once.

Layout: `<path>/<shard id>/<first sequence>.parquet`, one file per batch, written to a
hidden temporary name (Spark's file source skips names starting with '.') and renamed
into place; the checkpoint moves only after the rename. Each file records its batch's
last sequence in its Parquet metadata.

A file is never replaced once it exists: the streaming job may already have read it. If
the worker dies after the rename but before the checkpoint, the next owner resumes at the
same first record, finds that file, skips the records it already holds and checkpoints
them — and so on along the chain: the record after a landed file may start another one
(several lives may have died that way). So every record lands in exactly one file,
whatever size the replayed reads have."""

from __future__ import annotations

import os
import uuid

import pyarrow.parquet as pq
from pyarrow import fs

from streamconsumer.processor import Checkpointer, Record, ShardInfo
from streamconsumer.spark.batching import BatchInfo, BatchingProcessor
from streamconsumer.spark.schema import to_arrow

LAST_SEQUENCE_KEY = b"streamconsumer.last_sequence"


class BronzeProcessor(BatchingProcessor):
    """`path` is a local directory (a mounted volume) or any URI pyarrow reads (s3://…)."""

    def __init__(
        self,
        path: str,
        stream: str | None = None,
        max_records: int = 10_000,
        max_wait: float = 5.0,
    ) -> None:
        super().__init__(stream, max_records, max_wait)
        self.filesystem, self.root = fs.FileSystem.from_uri(
            path if "://" in path else os.path.abspath(path)
        )

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.directory = f"{self.root.rstrip('/')}/{shard.shard_id}"
        self.filesystem.create_dir(self.directory, recursive=True)
        self._checking = True  # the next record may start a file landed by an earlier life
        self._landed_through: int | None = None  # records up to here are in a landed file

    def file_for(self, first_sequence: str) -> str:
        return f"{self.directory}/{first_sequence}.parquet"

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        fresh: list[Record] = []
        file_end: Record | None = None
        for record in records:
            if fresh or not self._landed(record):
                fresh.append(record)
            elif int(record.sequence_number) == self._landed_through:
                file_end = record
        if file_end is not None:
            # Durable in a landed file. Only ever at a file's end: a resume point inside a
            # file would find no file starting there and land its tail a second time.
            checkpointer.checkpoint(file_end)
        super().process_records(fresh, checkpointer)

    def _landed(self, record: Record) -> bool:
        """Is `record` in a file an earlier life landed? Landed files form a chain from
        the resume point: look for one at each boundary until a boundary has none."""
        sequence = int(record.sequence_number)
        if self._landed_through is not None and sequence <= self._landed_through:
            return True
        if self._checking:
            self._landed_through = self._landed_last_sequence(record.sequence_number)
            if self._landed_through is not None:
                return True
            self._checking = False
        return False

    def _landed_last_sequence(self, first_sequence: str) -> int | None:
        path = self.file_for(first_sequence)
        if self.filesystem.get_file_info(path).type != fs.FileType.File:
            return None
        with self.filesystem.open_input_file(path) as handle:
            metadata = pq.read_metadata(handle).metadata or {}
        last = metadata.get(LAST_SEQUENCE_KEY)
        if last is None:  # someone else's file where ours belongs: never guess, never overwrite
            raise ValueError(f"{path} has no {LAST_SEQUENCE_KEY.decode()}: not a landed batch")
        return int(last)

    def commit(self, records: list[Record], batch: BatchInfo) -> None:
        table = to_arrow(self.stream, batch.shard_id, records).replace_schema_metadata(
            {LAST_SEQUENCE_KEY: batch.last_sequence.encode()}
        )
        final = self.file_for(batch.first_sequence)
        temporary = f"{self.directory}/.{batch.first_sequence}.{uuid.uuid4().hex}.tmp"
        pq.write_table(table, temporary, filesystem=self.filesystem)
        _sync(self.filesystem, temporary)
        self.filesystem.move(temporary, final)
        _sync(self.filesystem, self.directory)


def _sync(filesystem: fs.FileSystem, path: str) -> None:
    """On a local disk, make the file (or the rename in a directory) survive a node crash
    before the checkpoint says it did. Object stores are durable on return."""
    if isinstance(filesystem, fs.LocalFileSystem):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
