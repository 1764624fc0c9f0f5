"""Kinesis Data Streams, as a stream kind: its spec (`spec.source.kinesis`), its worker
settings, what the access policy matches, and its readers, polling or through enhanced
fan-out (`sources/kinesis.py`, imported when a stream is read)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import Field

from streamconsumer.models.source import (
    ENDPOINT_SETTINGS,
    AwsStreamSource,
    arn_field,
    name_field,
    named_once,
)
from streamconsumer.sources.kind import (
    Access,
    FanOutSupport,
    Identity,
    ReaderSettings,
    StreamKind,
)

if TYPE_CHECKING:
    from streamconsumer.sources.base import ConsumerRegistration, StreamSource


class KinesisConsumer(StrEnum):
    """How workers read a Kinesis stream: GetRecords (shared 2 MB/s per shard) or enhanced
    fan-out (SubscribeToShard through a registered consumer: its own 2 MB/s per shard, and
    records pushed as they arrive)."""

    POLLING = "polling"
    FAN_OUT = "fanOut"


class KinesisSpec(AwsStreamSource):
    """Where to read: a Kinesis data stream, by name or ARN. The stream cannot change
    under a consumer (its leases and checkpoints belong to that stream's shards); the
    endpoint can."""

    model_config = named_once("kinesis", "streamName")

    stream_name: str | None = name_field(1, 128, "Name of the stream (in `region`).")
    stream_arn: str | None = arn_field(
        r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:stream/[a-zA-Z0-9_.-]+$",
        "ARN of the stream; region and account come from it.",
    )
    consumer: KinesisConsumer = Field(
        default=KinesisConsumer.POLLING,
        description=(
            "polling (GetRecords) or fanOut (enhanced fan-out: the operator registers a "
            "stream consumer named <namespace>.<name> and deregisters it on delete)."
        ),
    )


def fan_out(spec: KinesisSpec) -> bool:
    return spec.consumer is KinesisConsumer.FAN_OUT


# The readers import boto3: only where a stream is read, never to build the CRD.
def lister(spec: KinesisSpec, identity: Identity) -> StreamSource:
    """The operator lists and probes by polling, whatever the consumer type."""
    from streamconsumer.sources import kinesis

    return kinesis.polling_source(spec, identity=identity)


def reader(spec: KinesisSpec, settings: ReaderSettings) -> StreamSource:
    """Readers that subscribe for a fanOut consumer, GetRecords otherwise."""
    from streamconsumer.sources import kinesis

    return kinesis.reader(spec, settings, subscribe=fan_out(spec))


def registration(spec: KinesisSpec, identity: Identity) -> ConsumerRegistration:
    from streamconsumer.sources import kinesis

    return kinesis.registration(spec, identity)


def consumer_name(namespace: str, name: str) -> str:
    from streamconsumer.sources.kinesis_consumer import consumer_name

    return consumer_name(namespace, name)


# The worker's settings, as every release names them.
SETTINGS = {
    "stream_name": "stream_name",
    "stream_arn": "stream_arn",
    "kinesis_consumer": "consumer",
    **ENDPOINT_SETTINGS,
}


def names(spec: KinesisSpec) -> tuple[str, str | None]:
    return (spec.stream_name or str(spec.stream_arn).rsplit("/", 1)[-1]), spec.stream_arn


ACTIONS = (
    "kinesis:ListShards",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
)
FAN_OUT_ACTIONS = (
    "kinesis:RegisterStreamConsumer",
    "kinesis:DescribeStreamConsumer",
    "kinesis:DeregisterStreamConsumer",
)

ERRORS = {
    "ResourceNotFoundException": "no such stream, or not in this region and account",
    "AccessDeniedException": f"the operator needs {', '.join(ACTIONS)} (and for fanOut "
    f"{', '.join(FAN_OUT_ACTIONS)})",
}

KIND = StreamKind(
    name="kinesis",
    title="Kinesis",
    spec=KinesisSpec,
    lister=lister,
    reader=reader,
    settings=SETTINGS,
    access=Access(
        names=names,
        noun="stream",
        services=("kinesis",),
        actions=ACTIONS + FAN_OUT_ACTIONS,
    ),
    fan_out=FanOutSupport(uses=fan_out, registration=registration, consumer_name=consumer_name),
    errors=ERRORS,
)
