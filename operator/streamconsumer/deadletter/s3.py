"""Dead letters to S3: one JSON-lines object per failed batch, named by consumer, shard
and sequence range, so a batch dead-lettered again overwrites its own object."""

from __future__ import annotations

import boto3

from streamconsumer.deadletter.base import CLIENT_CONFIG, FailedBatch, encode
from streamconsumer.models.failure import S3DeadLetters as Target


class S3DeadLetters:
    def __init__(self, target: Target) -> None:
        self._client = boto3.client(
            "s3", region_name=target.region, endpoint_url=target.endpoint_url, config=CLIENT_CONFIG
        )
        self._bucket = target.bucket
        self._prefix = target.prefix

    def key(self, batch: FailedBatch) -> str:
        first, last = batch.records[0], batch.records[-1]
        name = f"{first.sequence_number}-{last.sequence_number}.jsonl"
        return f"{self._prefix}{batch.consumer}/{batch.shard_id}/{name}"

    def write(self, batch: FailedBatch) -> None:
        body = "".join(encode(batch, record) + "\n" for record in batch.records)
        self._client.put_object(
            Bucket=self._bucket,
            Key=self.key(batch),
            Body=body.encode(),
            ContentType="application/x-ndjson",
        )
