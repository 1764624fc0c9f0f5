"""The one place that turns `spec.source` into a StreamSource, for the operator (shard
listing, backlog probes) and the worker (readers) alike."""

from __future__ import annotations

from streamconsumer.models.resource import DynamoDBStreamsSource as DynamoDBStreamsSpec
from streamconsumer.models.resource import KinesisConsumer, Source
from streamconsumer.models.resource import KinesisSource as KinesisSpec
from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.dynamodb_streams import (
    DynamoDBStreamsSource,
    TableStream,
    streams_client,
)
from streamconsumer.sources.initial_response import tolerate_missing_initial_response
from streamconsumer.sources.kinesis import KinesisSource, StreamRef, kinesis_client
from streamconsumer.sources.kinesis_consumer import StreamConsumers, consumer_name
from streamconsumer.sources.kinesis_fanout import FanOutKinesisSource
from streamconsumer.worker.config import WorkerConfig


def make_source(source: Source, max_records: int = 1000) -> StreamSource:
    if source.kinesis is not None:
        kinesis = source.kinesis
        return KinesisSource(
            kinesis_client(kinesis.region, kinesis.endpoint_url),
            StreamRef(name=kinesis.stream_name, arn=kinesis.stream_arn),
            max_records=max_records,
        )
    table = source.dynamodb_streams
    assert table is not None, "Source validates that one is set"
    return DynamoDBStreamsSource(
        streams_client(table.region, table.endpoint_url),
        TableStream(table_name=table.table_name, arn=table.stream_arn),
        max_records=max_records,
    )


def source_settings(source: Source) -> dict[str, str | None]:
    """The worker's environment settings (WorkerConfig fields) that name the source."""
    if source.kinesis is not None:
        kinesis = source.kinesis
        return {
            "source": "kinesis",
            "stream_name": kinesis.stream_name,
            "stream_arn": kinesis.stream_arn,
            "region": kinesis.region,
            "endpoint_url": kinesis.endpoint_url,
            "kinesis_consumer": kinesis.consumer.value,
        }
    table = source.dynamodb_streams
    assert table is not None, "Source validates that one is set"
    return {
        "source": "dynamodbStreams",
        "table_name": table.table_name,
        "stream_arn": table.stream_arn,
        "region": table.region,
        "endpoint_url": table.endpoint_url,
    }


def worker_source_spec(config: WorkerConfig) -> Source:
    """The inverse of `source_settings`: the source a worker was configured with."""
    if config.source == "dynamodbStreams":
        return Source(
            dynamodb_streams=DynamoDBStreamsSpec(
                table_name=config.table_name,
                stream_arn=config.stream_arn,
                region=config.region,
                endpoint_url=config.endpoint_url,
            )
        )
    return Source(
        kinesis=KinesisSpec(
            stream_name=config.stream_name,
            stream_arn=config.stream_arn,
            region=config.region,
            endpoint_url=config.endpoint_url,
            consumer=config.kinesis_consumer,
        )
    )


def worker_source(config: WorkerConfig) -> StreamSource:
    """The source a worker reads: readers that subscribe for a fanOut Kinesis consumer."""
    spec = worker_source_spec(config)
    source = make_source(spec, max_records=config.max_records)
    if spec.kinesis is None or spec.kinesis.consumer is not KinesisConsumer.FAN_OUT:
        return source
    assert isinstance(source, KinesisSource)
    # SubscribeToShard holds its connection open: reads wait for events, not replies.
    tolerate_missing_initial_response(source.client)
    return FanOutKinesisSource(
        source, consumer_name(config.namespace, config.consumer), config.resubscribe_seconds
    )


def stream_consumers(kinesis: KinesisSpec) -> StreamConsumers:
    """Registration of the stream's consumers, for the operator."""
    return StreamConsumers(
        kinesis_client(kinesis.region, kinesis.endpoint_url),
        StreamRef(name=kinesis.stream_name, arn=kinesis.stream_arn),
    )
