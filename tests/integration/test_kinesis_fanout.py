"""Enhanced fan-out on the faithful emulator (kinesis-local, over HTTP): the consumer's
registration, and records flowing through SubscribeToShard across re-subscriptions and a
split — nothing lost, nothing twice, in order per shard — through the worker's own
source (the same factory, client and initial-response tolerance)."""

from __future__ import annotations

import asyncio
import time

import pytest

from streamconsumer.controller.aws import fanout
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult, ShardReader
from streamconsumer.sources.kinesis import StreamRef
from streamconsumer.sources.kinesis_consumer import StreamConsumers, consumer_name
from streamconsumer.sources.kinesis_fanout import FanOutKinesisSource, FanOutShardReader
from streamconsumer.worker.source import worker_source
from testbed.kinesis import REGION, KinesisEmulator, create_stream, put_records, split_shard_in_half
from testbed.specs import TEST_BED_ACCESS as ACCESS
from testbed.specs import worker_config

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)
RESUBSCRIBE_SECONDS = 6.0  # above the 5 s Kinesis asks between subscriptions to one shard


pytestmark = pytest.mark.usefixtures("credentials")


def fan_out_source(kinesis: KinesisEmulator, stream: str) -> FanOutKinesisSource:
    config = worker_config(
        namespace="team",
        consumer=stream,
        stream_name=stream,
        region=REGION,
        endpoint_url=kinesis.endpoint_url,
        kinesis_consumer="fanOut",
        resubscribe_seconds=RESUBSCRIBE_SECONDS,
    )
    source = worker_source(config)
    assert isinstance(source, FanOutKinesisSource)
    return source


def read_until(
    reader: ShardReader, want: int, timeout: float, *, to_end: bool = False
) -> tuple[list[Record], ReadResult]:
    """Reads until `want` records (and shard end with `to_end`) or the timeout."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    result = ReadResult([], None)
    while time.monotonic() < deadline:
        result = reader.read()
        records.extend(result.records)
        if len(records) >= want and (result.shard_end or not to_end):
            return records, result
    raise AssertionError(f"{len(records)} of {want} records, shard end: {result.shard_end}")


def test_registration_is_idempotent_and_deregistration_final(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    create_stream(kinesis.client, stream_name, shards=1)
    consumers = StreamConsumers(kinesis.client, StreamRef(name=stream_name))
    name = consumer_name("team", stream_name)
    arn = consumers.register(name)
    assert consumers.register(name) == arn, "a second registration finds the first"
    consumers.deregister(name)
    deadline = time.monotonic() + 30
    while kinesis.client.list_stream_consumers(StreamARN=consumers.stream_arn())["Consumers"]:
        assert time.monotonic() < deadline, "the consumer was never deregistered"
        time.sleep(0.2)
    consumers.deregister(name)  # gone already: done


def consumers_of(kinesis: KinesisEmulator, consumers: StreamConsumers) -> list[str]:
    """The consumers registered on the stream and not being deregistered."""
    listed = kinesis.client.list_stream_consumers(StreamARN=consumers.stream_arn())
    return [c["ConsumerName"] for c in listed["Consumers"] if c["ConsumerStatus"] != "DELETING"]


def test_moving_fan_out_to_another_stream_deregisters_from_the_first(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    """The operator's handler for a `spec.source` edit, against the emulator: fanOut from
    stream A to stream B leaves a consumer on B and none on A; to B again keeps it."""
    first, second = f"{stream_name}-a", f"{stream_name}-b"
    for stream in (first, second):
        create_stream(kinesis.client, stream, shards=1)

    def spec(stream: str) -> dict[str, object]:
        where = {"region": REGION, "endpointURL": kinesis.endpoint_url, "consumer": "fanOut"}
        return {"kinesis": {"streamName": stream, **where}}

    name = consumer_name("team", "clicks")
    on_first = StreamConsumers(kinesis.client, StreamRef(name=first))
    on_second = StreamConsumers(kinesis.client, StreamRef(name=second))
    on_first.register(name)
    arn = asyncio.run(fanout.consumer_changed(ACCESS, "team", "clicks", spec(first), spec(second)))
    assert arn == on_second.consumer_arn(name)
    deadline = time.monotonic() + 30
    while consumers_of(kinesis, on_first):
        assert time.monotonic() < deadline, "the first stream's consumer stayed"
        time.sleep(0.2)
    assert consumers_of(kinesis, on_second) == [name]
    asyncio.run(fanout.consumer_changed(ACCESS, "team", "clicks", spec(second), spec(second)))
    assert on_second.consumer_arn(name) == arn, "the same stream keeps its consumer"


def test_records_flow_across_resubscriptions_and_a_split(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    client = kinesis.new_stream(stream_name, shards=2)
    consumers = StreamConsumers(client, StreamRef(name=stream_name))
    consumers.register(consumer_name("team", stream_name))
    source = fan_out_source(kinesis, stream_name)
    shards = [s.id for s in source.list_shards()]
    parent, other = shards
    readers: dict[str, FanOutShardReader] = {s: source.open_reader(s, TRIM_HORIZON) for s in shards}
    got: dict[str, list[Record]] = {s: [] for s in shards}
    try:
        first = put_records(client, stream_name, [(f"k{i}", b"a%d" % i) for i in range(40)])
        for shard in shards:
            want = sum(1 for placed, _ in first if placed == shard)
            got[shard] += read_until(readers[shard], want, 20)[0]

        # Across at least one re-subscription on each shard.
        time.sleep(RESUBSCRIBE_SECONDS + 1)
        second = put_records(client, stream_name, [(f"k{i}", b"b%d" % i) for i in range(40)])
        for shard in shards:
            want = sum(1 for placed, _ in first + second if placed == shard) - len(got[shard])
            got[shard] += read_until(readers[shard], want, 20)[0]

        assert all(readers[s].subscriptions >= 2 for s in shards), "re-subscribed"

        split_shard_in_half(client, stream_name, parent)
        third = put_records(client, stream_name, [(f"k{i}", b"c%d" % i) for i in range(40)])
        records, end = read_until(readers[parent], 0, 4 * RESUBSCRIBE_SECONDS, to_end=True)
        got[parent] += records
        children = {s.id for s in source.list_shards() if s.parents == (parent,)}
        assert end.shard_end, "the parent ends"
        assert set(end.child_shards) == children, "with its children, as polling says"
        assert readers[parent].read() == ReadResult([], 0, True, end.child_shards), "stays ended"
        for child in children:
            readers[child] = source.open_reader(child, TRIM_HORIZON)
            got[child] = []
        placed_by_shard: dict[str, list[str]] = {}
        for shard, sequence in first + second + third:
            placed_by_shard.setdefault(shard, []).append(sequence)
        for shard, sequences in placed_by_shard.items():
            want = len(sequences) - len(got[shard])
            if want:
                got[shard] += read_until(readers[shard], want, 20)[0]
        for shard, sequences in placed_by_shard.items():
            assert [r.sequence_number for r in got[shard]] == sequences, (
                f"{shard}: every record once, in order"
            )
        assert set(placed_by_shard) <= {parent, other, *children}
    finally:
        for reader in readers.values():
            reader.close()
