"""Dead letters to a Kinesis stream: one record per failed record, same partition key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3

from streamconsumer.deadletter.base import FailedBatch, Letter, chunks
from streamconsumer.models.failure import KinesisDeadLetters as Target
from streamconsumer.sources.aws import client_options

if TYPE_CHECKING:
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

RECORD_BYTES = 1024 * 1024
"""A record's data and partition key together: every stream's limit unless raised (a
stream raised to larger records is still written as if it had this one)."""
PUT_RECORDS_LIMIT = 500
PUT_RECORDS_BYTES = 5 * 1024 * 1024  # one request's data and partition keys


class KinesisDeadLetters:
    name = "Kinesis record"

    def __init__(self, target: Target) -> None:
        self._client = boto3.client("kinesis", **client_options(target.region, target.endpoint_url))
        self._stream: dict[str, Any] = (
            {"StreamARN": target.stream_arn} if target.stream_arn else {}
        ) or {"StreamName": target.stream_name}

    def limit(self) -> int:
        return RECORD_BYTES

    def size(self, letter: Letter) -> int:
        return len(letter.body) + len(letter.record.partition_key.encode())

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        for request in chunks(letters, self.size, PUT_RECORDS_LIMIT, PUT_RECORDS_BYTES):
            pending: list[PutRecordsRequestEntryTypeDef] = [
                {"Data": letter.body, "PartitionKey": letter.record.partition_key}
                for letter in request
            ]
            response = self._client.put_records(Records=pending, **self._stream)
            if response.get("FailedRecordCount"):
                results = response["Records"]
                codes = sorted({r["ErrorCode"] for r in results if "ErrorCode" in r})
                failed = sum("ErrorCode" in r for r in results)
                raise RuntimeError(f"{failed} dead letters not written: {codes}")
