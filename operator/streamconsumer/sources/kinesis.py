"""Kinesis Data Streams, as a stream kind: its spec (`models.resource.KinesisSource`),
the operator's lister and the workers' readers, polling (`kinesis_polling`) or through
enhanced fan-out (`kinesis_fanout`, subscribing through the consumer `kinesis_consumer`
registers), how the spec travels in the worker's environment, and what its AWS errors
mean. The names of `kinesis_polling` stay importable from here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamconsumer.models.resource import KinesisConsumer
from streamconsumer.models.resource import KinesisSource as KinesisSpec
from streamconsumer.sources.aws import endpoint_from_settings, endpoint_settings
from streamconsumer.sources.base import (
    FanOutSupport,
    Identity,
    ReaderSettings,
    Settings,
    StreamKind,
    StreamSource,
)
from streamconsumer.sources.initial_response import tolerate_missing_initial_response
from streamconsumer.sources.kinesis_consumer import StreamConsumers, consumer_name
from streamconsumer.sources.kinesis_fanout import RESUBSCRIBE_SECONDS, FanOutKinesisSource
from streamconsumer.sources.kinesis_polling import EXPIRED as EXPIRED
from streamconsumer.sources.kinesis_polling import KinesisShardReader as KinesisShardReader
from streamconsumer.sources.kinesis_polling import KinesisSource as KinesisSource
from streamconsumer.sources.kinesis_polling import StreamRef as StreamRef
from streamconsumer.sources.kinesis_polling import in_the_future as in_the_future
from streamconsumer.sources.kinesis_polling import kinesis_client as kinesis_client
from streamconsumer.sources.kinesis_polling import shard_iterator as shard_iterator
from streamconsumer.sources.kinesis_polling import to_shard as to_shard
from streamconsumer.sources.kinesis_polling import user_records as user_records


def stream_ref(spec: KinesisSpec) -> StreamRef:
    return StreamRef(name=spec.stream_name, arn=spec.stream_arn)


def polling_source(
    spec: KinesisSpec, max_records: int = 1000, identity: Identity = None
) -> KinesisSource:
    client = kinesis_client(spec.region, spec.endpoint_url, identity=identity)
    return KinesisSource(client, stream_ref(spec), max_records=max_records)


def lister(spec: KinesisSpec, identity: Identity) -> KinesisSource:
    """The operator lists and probes by polling, whatever the consumer type."""
    return polling_source(spec, identity=identity)


def reader(spec: KinesisSpec, settings: ReaderSettings) -> StreamSource:
    """Readers that subscribe for a fanOut consumer, GetRecords otherwise."""
    polling = polling_source(spec, settings.max_records)
    if spec.consumer is not KinesisConsumer.FAN_OUT:
        return polling
    if settings.namespace is None or settings.consumer is None:
        raise ValueError("a fanOut reader needs its StreamConsumer's namespace and name")
    # SubscribeToShard holds its connection open: reads wait for events, not replies.
    tolerate_missing_initial_response(polling.client)
    return FanOutKinesisSource(
        polling,
        consumer_name(settings.namespace, settings.consumer),
        settings.resubscribe_seconds or RESUBSCRIBE_SECONDS,
    )


def settings(spec: KinesisSpec) -> Settings:
    return {
        "stream_name": spec.stream_name,
        "stream_arn": spec.stream_arn,
        "kinesis_consumer": spec.consumer.value,
        **endpoint_settings(spec),
    }


def spec_from_settings(settings: Mapping[str, Any]) -> KinesisSpec:
    return KinesisSpec(
        stream_name=settings.get("stream_name"),
        stream_arn=settings.get("stream_arn"),
        consumer=settings.get("kinesis_consumer") or KinesisConsumer.POLLING,
        **endpoint_from_settings(settings),
    )


def registration(spec: KinesisSpec, identity: Identity) -> StreamConsumers:
    client = kinesis_client(spec.region, spec.endpoint_url, identity=identity)
    return StreamConsumers(client, stream_ref(spec))


ERRORS = {
    "ResourceNotFoundException": "no such stream, or not in this region and account",
    "AccessDeniedException": "the operator needs kinesis:ListShards, GetShardIterator and "
    "GetRecords (and for fanOut RegisterStreamConsumer, DescribeStreamConsumer and "
    "DeregisterStreamConsumer)",
}

KIND = StreamKind(
    name="kinesis",
    spec=KinesisSpec,
    lister=lister,
    reader=reader,
    settings=settings,
    spec_from_settings=spec_from_settings,
    fan_out=FanOutSupport(
        uses=lambda spec: spec.consumer is KinesisConsumer.FAN_OUT,
        registration=registration,
        consumer_name=consumer_name,
    ),
    errors=ERRORS,
)
