"""Dead letters to S3: one JSON-lines object per failed batch, named by consumer, shard
and sequence range, so a batch dead-lettered again overwrites its own object."""

from __future__ import annotations

import boto3

from streamconsumer.deadletter.base import FailedBatch, Letter
from streamconsumer.models.failure import S3DeadLetters as Target
from streamconsumer.sources.aws import client_options

OBJECT_BYTES = 5 * 1024**3  # one PutObject


class S3DeadLetters:
    name = "S3 object"

    def __init__(self, target: Target) -> None:
        self._client = boto3.client("s3", **client_options(target.region, target.endpoint_url))
        self._bucket = target.bucket
        self._prefix = target.prefix

    def limit(self) -> int:
        return OBJECT_BYTES

    def size(self, letter: Letter) -> int:
        return len(letter.body) + 1  # one line of the object

    def key(self, batch: FailedBatch, letters: list[Letter]) -> str:
        first, last = letters[0].record, letters[-1].record
        name = f"{first.sequence_number}-{last.sequence_number}.jsonl"
        return f"{self._prefix}{batch.consumer}/{batch.shard_id}/{name}"

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        self._client.put_object(
            Bucket=self._bucket,
            Key=self.key(batch, letters),
            Body=b"".join(letter.body + b"\n" for letter in letters),
            ContentType="application/x-ndjson",
        )
