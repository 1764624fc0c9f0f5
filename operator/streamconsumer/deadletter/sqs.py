"""Dead letters to an SQS queue: one message per failed record."""

from __future__ import annotations

import boto3

from streamconsumer.deadletter.base import FailedBatch, Letter, chunks
from streamconsumer.models.failure import SqsDeadLetters as Target
from streamconsumer.sources.aws import client_options

SEND_BATCH_LIMIT = 10
SEND_BATCH_BYTES = 1024 * 1024  # one SendMessageBatch's bodies together


class SqsDeadLetters:
    name = "SQS message"

    def __init__(self, target: Target) -> None:
        self._client = boto3.client("sqs", **client_options(target.region, target.endpoint_url))
        self._queue_url = target.queue_url
        self._limit: int | None = None

    def limit(self) -> int:
        """The queue's own MaximumMessageSize (up to 1 MiB; 256 KiB on queues made before
        2025 and by many templates), asked once."""
        if self._limit is None:
            attributes = self._client.get_queue_attributes(
                QueueUrl=self._queue_url, AttributeNames=["MaximumMessageSize"]
            )["Attributes"]
            self._limit = int(attributes["MaximumMessageSize"])
        return self._limit

    def size(self, letter: Letter) -> int:
        return len(letter.body)  # no message attributes: the body is all that counts

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        for request in chunks(letters, self.size, SEND_BATCH_LIMIT, SEND_BATCH_BYTES):
            entries = [
                {"Id": str(i), "MessageBody": letter.body.decode()}
                for i, letter in enumerate(request)
            ]
            response = self._client.send_message_batch(QueueUrl=self._queue_url, Entries=entries)
            if response.get("Failed"):
                codes = sorted({f["Code"] for f in response["Failed"]})
                raise RuntimeError(f"{len(response['Failed'])} dead letters not sent: {codes}")
