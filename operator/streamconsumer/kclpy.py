"""A processor written for kclpy (`amazon_kclpy.v3.processor.RecordProcessorBase`) runs on
the worker as it stands, without a JVM or the MultiLangDaemon (docs/migrating-from-kcl.md):
`processor.entrypoint` names the class as it names any other, and the worker drives it
through this adapter. It hands the class kclpy's own input messages (built by kclpy, so
they behave as under the daemon) and a checkpointer with kclpy's semantics: `checkpoint()`
everything delivered so far, `checkpoint(sequence_number, sub_sequence_number)` up to
and including that record, `CheckpointError` for a checkpoint KCL would refuse. The
checkpoint `shard_ended` must make (KCL retries the shard end without it) is stored as
SHARD_END, as ours.

kclpy itself (the Python package) must be importable: the class imports it."""

from __future__ import annotations

import base64
import importlib
import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from streamconsumer.processor import (
    BaseRecordProcessor,
    Checkpointer,
    CheckpointError,
    ProcessorFactory,
    ProcessResult,
    Record,
    ShardInfo,
)

KCLPY_BASE = "amazon_kclpy.v3.processor.RecordProcessorBase"


def is_kclpy_processor(target: type) -> bool:
    """Is `target` a kclpy v3 record processor class (told without importing kclpy)?"""
    return any(f"{base.__module__}.{base.__qualname__}" == KCLPY_BASE for base in target.__mro__)


class KclpyCheckpointer:
    """kclpy's checkpointer over ours, for one call; `records`: that call's, by
    (sequence number, sub-sequence number)."""

    def __init__(self, ours: Checkpointer, records: Sequence[Record], errors: ModuleType) -> None:
        self._ours = ours
        self._errors = errors
        self._by_position = {(r.sequence_number, r.sub_sequence_number or 0): r for r in records}

    def checkpoint(
        self, sequence_number: str | None = None, sub_sequence_number: int | None = None
    ) -> None:
        at: Record | str | None = sequence_number
        if sequence_number is not None:
            at = self._by_position.get((sequence_number, sub_sequence_number or 0), at)
        try:
            self._ours.checkpoint(at)
        except CheckpointError:  # backwards, or past what was delivered: as KCL words it
            raise self._errors.CheckpointError("IllegalArgumentException") from None


class KclpyProcessor(BaseRecordProcessor):
    """Our lifecycle, delivered to a kclpy v3 processor as the MultiLangDaemon's messages,
    decoded by kclpy's own decoder (`amazon_kclpy.dispatch.message_decode`)."""

    def __init__(self, delegate: Any) -> None:
        self.delegate = delegate
        self._dispatch = importlib.import_module("amazon_kclpy.dispatch")
        self._errors = importlib.import_module("amazon_kclpy.checkpoint_error")

    def initialize(self, shard: ShardInfo) -> None:
        said = {"shardId": shard.shard_id, "sequenceNumber": shard.start_sequence}
        self._send({"action": "initialize", **said, "subSequenceNumber": 0}, None)

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> ProcessResult:
        message = {
            "action": "processRecords",
            "records": [_record(record) for record in records],
            "millisBehindLatest": None,
        }
        self._send(message, KclpyCheckpointer(checkpointer, records, self._errors))
        return None

    def lease_lost(self) -> None:
        self._send({"action": "leaseLost"}, None)

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        self._send({"action": "shardEnded"}, KclpyCheckpointer(checkpointer, (), self._errors))

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpoints = KclpyCheckpointer(checkpointer, (), self._errors)
        self._send({"action": "shutdownRequested"}, checkpoints)

    def _send(self, message: dict[str, Any], checkpointer: KclpyCheckpointer | None) -> None:
        """The message as the daemon's JSON line would arrive, dispatched as kclpy does."""
        decoded = json.loads(json.dumps(message), object_hook=self._dispatch.message_decode)
        decoded.dispatch(checkpointer, self.delegate)


def _record(record: Record) -> dict[str, Any]:
    arrived = record.approximate_arrival_timestamp
    return {
        "action": "record",
        "sequenceNumber": record.sequence_number,
        "subSequenceNumber": record.sub_sequence_number or 0,
        "approximateArrivalTimestamp": int(arrived.timestamp() * 1000) if arrived else 0,
        "partitionKey": record.partition_key,
        "data": base64.b64encode(record.data).decode(),
    }


def adapted(target: type) -> ProcessorFactory:
    """A factory of per-shard processors for kclpy class `target`."""
    return lambda: KclpyProcessor(target())
