"""Dead letters to an SQS queue: one message per failed record."""

from __future__ import annotations

import boto3

from streamconsumer.deadletter.base import CLIENT_CONFIG, FailedBatch, encode
from streamconsumer.models.failure import SqsDeadLetters as Target

SEND_BATCH_LIMIT = 10


class SqsDeadLetters:
    def __init__(self, target: Target) -> None:
        self._client = boto3.client(
            "sqs", region_name=target.region, endpoint_url=target.endpoint_url, config=CLIENT_CONFIG
        )
        self._queue_url = target.queue_url

    def write(self, batch: FailedBatch) -> None:
        records = batch.records
        for start in range(0, len(records), SEND_BATCH_LIMIT):
            entries = [
                {"Id": str(i), "MessageBody": encode(batch, record)}
                for i, record in enumerate(records[start : start + SEND_BATCH_LIMIT])
            ]
            response = self._client.send_message_batch(QueueUrl=self._queue_url, Entries=entries)
            if response.get("Failed"):
                codes = sorted({f["Code"] for f in response["Failed"]})
                raise RuntimeError(f"{len(response['Failed'])} dead letters not sent: {codes}")
