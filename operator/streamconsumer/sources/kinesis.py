"""Kinesis Data Streams' readers (the kind itself: `sources/kinds/kinesis.py`): polling
(`kinesis_polling`) or through enhanced fan-out (`kinesis_fanout`, subscribing through the
consumer `kinesis_consumer` registers). The names of `kinesis_polling` stay importable
from here."""

from __future__ import annotations

from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.initial_response import tolerate_missing_initial_response
from streamconsumer.sources.kind import Identity, ReaderSettings
from streamconsumer.sources.kinds.kinesis import KinesisSpec
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


def reader(spec: KinesisSpec, settings: ReaderSettings, subscribe: bool) -> StreamSource:
    """Readers that subscribe (enhanced fan-out), or that call GetRecords."""
    polling = polling_source(spec, settings.max_records)
    if not subscribe:
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


def registration(spec: KinesisSpec, identity: Identity) -> StreamConsumers:
    client = kinesis_client(spec.region, spec.endpoint_url, identity=identity)
    return StreamConsumers(client, stream_ref(spec))
