"""What a dead-letter target is given, and the one JSON shape every target writes: the
record (data in base64) with where it came from and why it failed."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.config import Config

from streamconsumer.processor import Record

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=5,
    read_timeout=10,
    tcp_keepalive=True,
)
"""Calls that end in seconds: a stuck target must not hold a shard past its lease."""


@dataclass(frozen=True)
class FailedBatch:
    consumer: str  # namespace/name
    shard_id: str
    records: list[Record]
    error: str
    attempts: int


class DeadLetterWriter(Protocol):
    def write(self, batch: FailedBatch) -> None:
        """Stores every record of the batch, or raises (the worker retries)."""
        ...


def document(batch: FailedBatch, record: Record) -> dict[str, Any]:
    arrival = record.approximate_arrival_timestamp
    return {
        "consumer": batch.consumer,
        "shardId": batch.shard_id,
        "sequenceNumber": record.sequence_number,
        "subSequenceNumber": record.sub_sequence_number,
        "partitionKey": record.partition_key,
        "approximateArrivalTimestamp": arrival.isoformat() if arrival else None,
        "data": base64.b64encode(record.data).decode(),
        "error": batch.error,
        "attempts": batch.attempts,
        "deadLetteredAt": datetime.now(UTC).isoformat(),
    }


def encode(batch: FailedBatch, record: Record) -> str:
    return json.dumps(document(batch, record), separators=(",", ":"))
