"""The stream consumer a fanOut StreamConsumer subscribes through: its name (derived from
the resource, so the operator and every worker agree without talking), registration
(idempotent, waiting until ACTIVE) and deregistration. Used by the operator's handlers."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.kinesis_polling import StreamRef

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

log = logging.getLogger(__name__)
NAME_LIMIT = 128  # Kinesis' limit on a consumer name ([a-zA-Z0-9_.-]+)
ACTIVE_TIMEOUT_SECONDS = 120.0  # Kinesis takes seconds to activate a consumer
POLL_SECONDS = 1.0


def consumer_name(namespace: str, name: str) -> str:
    """`<namespace>.<name>`: unambiguous (namespaces have no dots) and valid (both are
    DNS names). A longer one keeps a prefix and gains a hash of the whole, still unique."""
    full = f"{namespace}.{name}"
    if len(full) <= NAME_LIMIT:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    return f"{full[: NAME_LIMIT - len(digest) - 1]}-{digest}"


class StreamConsumers:
    """Registration of one stream's consumers."""

    def __init__(
        self,
        client: KinesisClient,
        stream: StreamRef,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._stream = stream
        self._sleep = sleep
        self._clock = clock

    def stream_arn(self) -> str:
        if self._stream.arn:
            return self._stream.arn
        summary = self._client.describe_stream_summary(StreamName=self._stream.name or "")
        return summary["StreamDescriptionSummary"]["StreamARN"]

    def register(self, name: str, timeout: float = ACTIVE_TIMEOUT_SECONDS) -> str:
        """Registers `name` unless it exists, waits until it is ACTIVE; its ARN."""
        stream_arn = self.stream_arn()
        try:
            self._client.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name)
            log.info("stream consumer %s registered", name)
        except ClientError as error:
            if aws_error(error).code != "ResourceInUseException":  # it exists: ours, from before
                raise
        deadline = self._clock() + timeout
        while True:
            described = self._client.describe_stream_consumer(
                StreamARN=stream_arn, ConsumerName=name
            )["ConsumerDescription"]
            if described["ConsumerStatus"] == "ACTIVE":
                return described["ConsumerARN"]
            if described["ConsumerStatus"] == "DELETING":
                raise RuntimeError(f"stream consumer {name} is being deregistered; try again")
            if self._clock() >= deadline:
                raise TimeoutError(f"stream consumer {name} not ACTIVE after {timeout:.0f} s")
            self._sleep(POLL_SECONDS)

    def consumer_arn(self, name: str) -> str | None:
        """The ARN of the consumer `name` on this stream; None if it (or the stream) is
        gone."""
        try:
            return self._client.describe_stream_consumer(
                StreamARN=self.stream_arn(), ConsumerName=name
            )["ConsumerDescription"]["ConsumerARN"]
        except ClientError as error:
            if aws_error(error).code != "ResourceNotFoundException":
                raise
        return None

    def deregister(self, name: str) -> None:
        """Deregisters `name`; done if it (or the stream) is already gone."""
        try:
            self._client.deregister_stream_consumer(StreamARN=self.stream_arn(), ConsumerName=name)
            log.info("stream consumer %s deregistered", name)
        except ClientError as error:
            if aws_error(error).code != "ResourceNotFoundException":
                raise
