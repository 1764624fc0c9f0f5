"""A record processor written for kclpy's v3 interface, as a team running KCL's
MultiLangDaemon has one: it keeps what it was given and checkpoints as its `plan` says
(class attributes, set by the test that runs it)."""

from __future__ import annotations

from typing import Any, ClassVar

from amazon_kclpy import kcl  # type: ignore[import-not-found]
from amazon_kclpy.v3 import processor  # type: ignore[import-not-found]


class KclApp(processor.RecordProcessorBase):  # type: ignore[misc]
    seen: ClassVar[list[tuple[str, Any]]] = []  # (call, what it was given)
    # Per process_records call: None checkpoints all, (sequence, sub) there, "skip" none.
    plan: ClassVar[list[Any]] = []
    errors: ClassVar[list[str]] = []

    def initialize(self, initialize_input: Any) -> None:
        self.seen.append(
            ("initialize", (initialize_input.shard_id, initialize_input.sequence_number))
        )

    def process_records(self, process_records_input: Any) -> None:
        records = [
            (r.sequence_number, r.sub_sequence_number, r.partition_key, r.binary_data)
            for r in process_records_input.records
        ]
        self.seen.append(("process_records", records))
        step = self.plan.pop(0) if self.plan else None
        if step == "skip":
            return
        try:
            if step is None:
                process_records_input.checkpointer.checkpoint()
            else:
                process_records_input.checkpointer.checkpoint(*step)
        except kcl.CheckpointError as error:
            self.errors.append(error.value)

    def lease_lost(self, lease_lost_input: Any) -> None:
        self.seen.append(("lease_lost", None))

    def shard_ended(self, shard_ended_input: Any) -> None:
        self.seen.append(("shard_ended", None))
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        self.seen.append(("shutdown_requested", None))
        shutdown_requested_input.checkpointer.checkpoint()
