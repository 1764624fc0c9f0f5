"""The recording processor written async, for the end-to-end test of async processors.
Apart from testbed.recording: the previous release's workers import that one, and their
SDK has no streamconsumer.awaiting."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from streamconsumer.awaiting import AsyncBaseRecordProcessor
from streamconsumer.processor import Checkpointer, ProcessResult, Record, ShardInfo
from testbed.recording import RecordingProcessor


class AsyncRecordingProcessor(AsyncBaseRecordProcessor):
    """Awaits before each call, then records as RecordingProcessor does; each thread a
    call ran on is a line of $RECORD_DIR/<worker>.threads."""

    def __init__(self) -> None:
        self.recording = RecordingProcessor()

    async def initialize(self, shard: ShardInfo) -> None:
        await asyncio.sleep(0)
        self.recording.initialize(shard)
        self.threads = Path(os.environ["RECORD_DIR"]) / f"{self.recording.worker}.threads"

    async def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> ProcessResult:
        await asyncio.sleep(0.001)  # an awaited call: the batch is recorded after it
        with self.threads.open("a") as out:
            out.write(threading.current_thread().name + "\n")
        return self.recording.process_records(records, checkpointer)

    async def shard_ended(self, checkpointer: Checkpointer) -> None:
        await asyncio.sleep(0)
        self.recording.shard_ended(checkpointer)

    async def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        await asyncio.sleep(0)
        self.recording.shutdown_requested(checkpointer)
