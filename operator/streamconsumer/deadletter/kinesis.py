"""Dead letters to a Kinesis stream: one record per failed record, same partition key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3

from streamconsumer.deadletter.base import CLIENT_CONFIG, FailedBatch, encode
from streamconsumer.models.failure import KinesisDeadLetters as Target

if TYPE_CHECKING:
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

PUT_RECORDS_LIMIT = 500


class KinesisDeadLetters:
    def __init__(self, target: Target) -> None:
        self._client = boto3.client(
            "kinesis",
            region_name=target.region,
            endpoint_url=target.endpoint_url,
            config=CLIENT_CONFIG,
        )
        self._stream: dict[str, Any] = (
            {"StreamARN": target.stream_arn} if target.stream_arn else {}
        ) or {"StreamName": target.stream_name}

    def write(self, batch: FailedBatch) -> None:
        entries: list[PutRecordsRequestEntryTypeDef] = [
            {"Data": encode(batch, r).encode(), "PartitionKey": r.partition_key}
            for r in batch.records
        ]
        for start in range(0, len(entries), PUT_RECORDS_LIMIT):
            pending = entries[start : start + PUT_RECORDS_LIMIT]
            response = self._client.put_records(Records=pending, **self._stream)
            if response.get("FailedRecordCount"):
                failed = [
                    entry
                    for entry, result in zip(pending, response["Records"], strict=True)
                    if "ErrorCode" in result
                ]
                codes = {r["ErrorCode"] for r in response["Records"] if "ErrorCode" in r}
                raise RuntimeError(f"{len(failed)} dead letters not written: {sorted(codes)}")
