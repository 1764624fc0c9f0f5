"""A kclpy v3 record processor that records what it processes as testbed.recording's
RecordingProcessor does (lines `read_report` reads), for the switch from KCL on real
parts: the same class runs under KCL's MultiLangDaemon (its `executableName`:
`python -m testbed.kclpy_recording`) and then on our worker (`processor.entrypoint`
`testbed.kclpy_recording:RecordingKclApp`).

It checkpoints each batch. With RECORD_CHECKPOINT_BELOW=K it checkpoints no further than
a shard's last record whose data `r-N` (Scenario.produce's values) has N < K, and not on
a shutdown: an application stopped with records processed after its last checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from amazon_kclpy import kcl  # type: ignore[import-not-found]
from amazon_kclpy.v3 import processor  # type: ignore[import-not-found]

from testbed.recording import record_lines


class RecordingKclApp(processor.RecordProcessorBase):  # type: ignore[misc]
    def initialize(self, initialize_input: Any) -> None:
        self.shard = initialize_input.shard_id
        # Who processed it: our worker pod, or KCL (its daemon runs one process a shard).
        self.worker = os.environ.get("STREAMCONSUMER_WORKER_NAME", "kcl")
        directory = Path(os.environ["RECORD_DIR"])
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{self.worker}.{self.shard}.{os.getpid()}.jsonl"
        below = os.environ.get("RECORD_CHECKPOINT_BELOW")
        self.below = int(below) if below else None

    def process_records(self, process_records_input: Any) -> None:
        records = [
            (r.sequence_number, r.sub_sequence_number, r.binary_data.decode())
            for r in process_records_input.records
        ]
        with self.path.open("a") as out:
            out.write(record_lines(self.shard, self.worker, records))
        checkpointer = process_records_input.checkpointer
        if self.below is None:
            checkpointer.checkpoint()
            return
        done = [(seq, sub) for seq, sub, data in records if int(data[2:]) < self.below]  # r-N
        if done:
            checkpointer.checkpoint(*done[-1])

    def lease_lost(self, lease_lost_input: Any) -> None:
        pass

    def shard_ended(self, shard_ended_input: Any) -> None:
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        if self.below is None:
            shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(RecordingKclApp()).run()
