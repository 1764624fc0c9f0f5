"""DynamoDB Streams records as boto3 returns them, for the stubbed reader tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"
NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
S1 = "shardId-00000000000000000001-11111111"


def q(number: int) -> str:
    """A sequence number as DynamoDB Streams writes them (21 digits or more)."""
    return f"{number:021d}"


def change(
    sequence: str,
    event: str = "INSERT",
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    created: datetime = NOW,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": created,
        "Keys": {"pk": {"S": "a"}, "sk": {"N": "1"}},
        "SequenceNumber": sequence,
        "SizeBytes": 10,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        body["NewImage"] = new
    if old is not None:
        body["OldImage"] = old
    return {
        "eventID": f"e{sequence}",
        "eventName": event,
        "eventSource": "aws:dynamodb",
        "dynamodb": body,
    }
