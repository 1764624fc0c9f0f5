"""The DynamoDB Streams source against DynamoDB Local over real HTTP: shards, records
with their images, reading to a shard's end, resuming after a checkpoint, backlog.
(Lineage across splits and rollovers, which DynamoDB Local never makes, is in
tests/unit/test_dynamodb_streams.py; docs/emulators.md says what else it lacks.)"""

from __future__ import annotations

import dataclasses
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest

from streamconsumer.core.lineage import assignable_shards
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.models.resource import Source
from streamconsumer.processor import Record
from streamconsumer.sources.aws import client_options
from streamconsumer.sources.dynamodb_streams import DynamoDBStreamsSource, TableStream
from streamconsumer.sources.factory import make_source
from streamconsumer.sources.fast_decode import DECODES
from testbed.dynamodb import REGION, DynamoDBLocal, create_table

TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)


pytestmark = pytest.mark.usefixtures("credentials")


def source_for(local: DynamoDBLocal, **where: str) -> DynamoDBStreamsSource:
    spec = Source.model_validate(
        {"dynamodbStreams": {**where, "region": REGION, "endpointURL": local.endpoint_url}}
    )
    source = make_source(spec)
    assert isinstance(source, DynamoDBStreamsSource)
    return source


def read_all(source: DynamoDBStreamsSource, shard: str, start: StartPosition) -> list[Record]:
    reader = source.open_reader(shard, start)
    records: list[Record] = []
    for _ in range(20):
        result = reader.read()
        records.extend(result.records)
        if not result.records:
            return records
    raise AssertionError("the shard never ran dry")


def test_dynamodb_local_is_reachable_only_through_this_machines_loopback(
    dynamodb_local: DynamoDBLocal,
) -> None:
    """It listens on every interface of a network namespace that has nothing but a
    loopback; we reach it through a socket on 127.0.0.1 here."""
    forwarder = dynamodb_local.server.pid
    children = Path(f"/proc/{forwarder}/task/{forwarder}/children").read_text().split()
    assert len(children) == 1
    java = int(children[0])
    assert b"dynamodbv2.local.main.ServerRunner" in Path(f"/proc/{java}/cmdline").read_bytes()
    ours = os.stat("/proc/self/ns/net").st_ino
    assert os.stat(f"/proc/{java}/ns/net").st_ino != ours
    # /proc/PID/net shows the process's own network namespace: a loopback, nothing else.
    devices = Path(f"/proc/{java}/net/dev").read_text().splitlines()[2:]
    assert [line.split(":")[0].strip() for line in devices] == ["lo"]
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    port = f"{dynamodb_local.port:04X}"
    ours_listening = [
        fields[1]
        for fields in map(str.split, listening)
        if fields[1].endswith(f":{port}") and fields[3] == "0A"  # LISTEN
    ]
    assert ours_listening == [f"0100007F:{port}"], "bound to 127.0.0.1 only"


def test_shards_by_table_name_and_by_stream_arn(
    dynamodb_local: DynamoDBLocal, table_name: str
) -> None:
    arn = create_table(dynamodb_local.client, table_name)
    by_name = source_for(dynamodb_local, tableName=table_name)
    by_arn = source_for(dynamodb_local, streamARN=arn)
    shards = by_name.list_shards()
    assert shards == by_arn.list_shards()
    assert by_name.stream_of(shards[0].id) == arn, "the table's stream"
    assert len(shards) == 1  # DynamoDB Local: one shard per stream
    assert not shards[0].closed
    assert shards[0].parents == ()


def test_insert_modify_remove_carry_keys_and_images(
    dynamodb_local: DynamoDBLocal, table_name: str
) -> None:
    client = dynamodb_local.client
    create_table(client, table_name, sort_key=True)
    key = {"pk": {"S": "order-1"}, "sk": {"N": "7"}}
    client.put_item(
        TableName=table_name,
        Item={**key, "total": {"N": "12.50"}, "tags": {"SS": ["new"]}, "blob": {"B": b"\x01"}},
    )
    client.update_item(
        TableName=table_name,
        Key=key,
        UpdateExpression="SET #s = :s, #t = :t",
        ExpressionAttributeNames={"#s": "status", "#t": "total"},
        ExpressionAttributeValues={":s": {"S": "paid"}, ":t": {"N": "13"}},
    )
    client.delete_item(TableName=table_name, Key=key)
    source = source_for(dynamodb_local, tableName=table_name)
    (shard,) = source.list_shards()
    insert, modify, remove = read_all(source, shard.id, TRIM_HORIZON)

    assert [insert.event_name, modify.event_name, remove.event_name] == [
        "INSERT",
        "MODIFY",
        "REMOVE",
    ]
    keys = {"pk": "order-1", "sk": Decimal(7)}
    assert insert.keys == modify.keys == remove.keys == keys
    assert insert.old_image is None
    assert insert.new_image is not None
    assert insert.new_image["total"] == Decimal("12.50")
    assert insert.new_image["tags"] == {"new"}
    assert insert.new_image["blob"].value == b"\x01"
    assert modify.old_image == insert.new_image
    assert modify.new_image == {**insert.new_image, "status": "paid", "total": Decimal(13)}
    assert remove.new_image is None
    assert remove.old_image == modify.new_image
    assert insert.partition_key == modify.partition_key == remove.partition_key
    sequences = [int(r.sequence_number) for r in (insert, modify, remove)]
    assert sequences == sorted(sequences)
    assert len(set(sequences)) == 3
    assert insert.approximate_arrival_timestamp is not None


def test_resumes_after_a_checkpoint_and_reads_a_closed_shard_to_its_end(
    dynamodb_local: DynamoDBLocal, table_name: str
) -> None:
    """Disabling a table's stream closes its shard: the reader then reads the rest and
    sees the end (no NextShardIterator); the listing shows it closed."""
    client = dynamodb_local.client
    create_table(client, table_name)
    for n in range(30):
        client.put_item(TableName=table_name, Item={"pk": {"S": f"k{n}"}, "n": {"N": str(n)}})
    source = source_for(dynamodb_local, tableName=table_name)
    source.max_records = 7  # several reads
    (shard,) = source.list_shards()
    first = read_all(source, shard.id, TRIM_HORIZON)
    assert [r.new_image["n"] for r in first if r.new_image] == list(range(30))

    checkpoint = first[11].sequence_number
    after = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=checkpoint)
    assert source.backlog(shard.id, after) is not None, "records wait after the checkpoint"
    resumed = source.open_reader(shard.id, after)
    batch = resumed.read()
    assert [r.sequence_number for r in batch.records] == [r.sequence_number for r in first[12:19]]
    assert not batch.shard_end

    client.update_table(TableName=table_name, StreamSpecification={"StreamEnabled": False})
    (closed,) = source.list_shards()
    assert closed.closed
    records = list(batch.records)
    for _ in range(10):
        result = resumed.read()
        records.extend(result.records)
        if result.shard_end:
            break
    else:
        raise AssertionError("the closed shard never ended")
    assert [r.sequence_number for r in records] == [r.sequence_number for r in first[12:]]
    assert resumed.read().shard_end, "stays ended"
    at_end = StartPosition(
        type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=first[-1].sequence_number
    )
    assert source.backlog(shard.id, at_end) == 1, "read to its end, yet not finished"


def test_backlog_is_none_once_caught_up(dynamodb_local: DynamoDBLocal, table_name: str) -> None:
    client = dynamodb_local.client
    create_table(client, table_name)
    client.put_item(TableName=table_name, Item={"pk": {"S": "a"}})
    source = source_for(dynamodb_local, tableName=table_name)
    (shard,) = source.list_shards()
    waiting = source.backlog(shard.id, TRIM_HORIZON)
    assert waiting is not None
    assert waiting >= 1
    (only,) = read_all(source, shard.id, TRIM_HORIZON)
    after = StartPosition(
        type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=only.sequence_number
    )
    assert source.backlog(shard.id, after) is None


def test_a_re_enabled_stream_is_read_after_the_old_streams_tail(
    dynamodb_local: DynamoDBLocal, table_name: str
) -> None:
    """Changing a table's StreamViewType means disabling its stream and enabling a new
    one. Sources made before (a running operator's lister, a worker's readers) notice
    the new stream; the old stream's unread tail is read to its end first, then the new
    stream: in order, nothing lost. An operator started afterwards (a failover) still
    lists the old stream's shard, so its lease is not dropped while its tail is
    readable."""
    client = dynamodb_local.client
    create_table(client, table_name)
    lister = source_for(dynamodb_local, tableName=table_name)
    worker = source_for(dynamodb_local, tableName=table_name)
    worker.max_records = 1  # one record per read: a0 is read, a1 and a2 are the tail
    for n in range(3):
        client.put_item(TableName=table_name, Item={"pk": {"S": f"a{n}"}})
    (old,) = lister.list_shards()
    readers = {old.id: worker.open_reader(old.id, TRIM_HORIZON)}
    read = [r.keys["pk"] for r in readers[old.id].read().records if r.keys]
    assert read == ["a0"]

    client.update_table(TableName=table_name, StreamSpecification={"StreamEnabled": False})
    client.update_table(
        TableName=table_name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
    )
    for n in range(2):
        client.put_item(TableName=table_name, Item={"pk": {"S": f"b{n}"}})

    failover = source_for(dynamodb_local, tableName=table_name)
    assert old.id in {shard.id for shard in failover.list_shards()}, "the old tail is listed"

    finished: set[str] = set()
    first_seen_ready: list[str] = []
    for _ in range(20):
        shards = lister.list_shards()
        ready = assignable_shards(shards, finished)
        first_seen_ready += [shard for shard in ready if shard not in first_seen_ready]
        for shard_id in ready:
            reader = readers.setdefault(shard_id, worker.open_reader(shard_id, TRIM_HORIZON))
            result = reader.read()
            read += [r.keys["pk"] for r in result.records if r.keys]
            if result.shard_end:
                finished.add(shard_id)
        if len(read) == 5:
            break
    new = [shard.id for shard in lister.list_shards() if shard.id != old.id]
    assert len(new) == 1, "the new stream's shard is listed"
    assert first_seen_ready == [old.id, *new], "the new stream waits for the old one"
    assert read == ["a0", "a1", "a2", "b0", "b1"]


def test_dynamodb_locals_answers_are_decoded_fast_into_botocores_records(
    dynamodb_local: DynamoDBLocal, table_name: str
) -> None:
    """Real answers over HTTP, every attribute type: the worker's client decodes every
    one fast (none falls back), into what botocore's parser gives."""
    client = dynamodb_local.client
    create_table(client, table_name, sort_key=True)
    key = {"pk": {"S": "order-1"}, "sk": {"N": "7"}}
    every_type: dict[str, Any] = {
        "s": {"S": "naïve ☃"},
        "n": {"N": "-12.50"},
        "b": {"B": b"\x00\xff"},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
        "m": {"M": {"l": {"L": [{"S": "x"}, {"M": {"deep": {"BOOL": False}}}]}}},
        "null": {"NULL": True},
        "bool": {"BOOL": True},
    }
    client.put_item(TableName=table_name, Item={**key, **every_type})
    client.put_item(TableName=table_name, Item={**key, "s": {"S": "changed"}})
    client.delete_item(TableName=table_name, Key=key)

    def read(source: DynamoDBStreamsSource) -> list[tuple[object, ...]]:
        (shard,) = source.list_shards()
        records = read_all(source, shard.id, TRIM_HORIZON)
        return [tuple(getattr(r, f.name) for f in dataclasses.fields(Record)) for r in records]

    decodes = DECODES["dynamodbstreams"]
    before = decodes.fast, decodes.fallbacks
    fast = read(source_for(dynamodb_local, tableName=table_name))
    assert decodes.fast >= before[0] + 2, "the page of records and the empty one after it"
    assert decodes.fallbacks == before[1], "none left to botocore's parser"
    assert len(fast) == 3
    botocore_parsed = boto3.client(
        "dynamodbstreams", **client_options(REGION, dynamodb_local.endpoint_url)
    )
    assert fast == read(DynamoDBStreamsSource(botocore_parsed, TableStream(table_name=table_name)))
