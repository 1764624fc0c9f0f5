"""The KCL side's record processor: kclpy's v3 interface, run by KCL's MultiLangDaemon as
one Python child process per shard. It does what bench/peers/ours_app.py does: tally the
batch, then checkpoint at its last record."""

from __future__ import annotations

from typing import Any

from amazon_kclpy import kcl  # type: ignore[import-not-found]
from amazon_kclpy.v3 import processor  # type: ignore[import-not-found]
from tally import Tally  # type: ignore[import-not-found]  # beside this file, on sys.path


class PeersProcessor(processor.RecordProcessorBase):  # type: ignore[misc]
    def __init__(self) -> None:
        self.tally = Tally()
        self.shard = "?"

    def initialize(self, initialize_input: Any) -> None:
        self.shard = initialize_input.shard_id

    def process_records(self, process_records_input: Any) -> None:
        self.tally.note(
            self.shard,
            ((r.sequence_number, r.binary_data) for r in process_records_input.records),
        )
        process_records_input.checkpointer.checkpoint()

    def lease_lost(self, lease_lost_input: Any) -> None:
        pass

    def shard_ended(self, shard_ended_input: Any) -> None:
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(PeersProcessor()).run()
