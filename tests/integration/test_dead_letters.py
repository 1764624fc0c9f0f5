"""The dead-letter targets over HTTP (issue 13.2): Kinesis on its emulator, SQS and S3 on
moto's server. Each holds every failed record with where it came from and why."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streamconsumer.deadletter import FailedBatch, LetterTooLarge, writer_for
from streamconsumer.models.failure import DeadLetterTarget
from streamconsumer.processor import Record
from testbed.kinesis import KinesisEmulator, create_stream, list_all_shards
from testbed.moto import REGION, MotoServer

ARRIVAL = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer.start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


pytestmark = pytest.mark.usefixtures("credentials")


def failed_batch(count: int = 12) -> FailedBatch:
    records = [
        Record(f"v{i}".encode(), f"k{i}", str(100 + i), approximate_arrival_timestamp=ARRIVAL)
        for i in range(count)
    ]
    return FailedBatch("ns/orders", "shardId-000000000003", records, "ValueError: bad", 4)


def check(letters: list[dict[str, Any]], batch: FailedBatch) -> None:
    assert sorted(int(letter["sequenceNumber"]) for letter in letters) == [
        int(r.sequence_number) for r in batch.records
    ]
    first = next(letter for letter in letters if letter["sequenceNumber"] == "100")
    assert base64.b64decode(first["data"]) == b"v0"
    assert first["partitionKey"] == "k0"
    assert first["shardId"] == "shardId-000000000003"
    assert first["consumer"] == "ns/orders"
    assert first["error"] == "ValueError: bad"
    assert first["attempts"] == 4
    assert first["approximateArrivalTimestamp"] == ARRIVAL.isoformat()


def kinesis_target(kinesis: KinesisEmulator, stream_name: str) -> DeadLetterTarget:
    """A new one-shard stream on the emulator, as a dead-letter target."""
    create_stream(kinesis.client, stream_name, 1)
    stream = {"streamName": stream_name, "region": REGION, "endpointURL": kinesis.endpoint_url}
    return DeadLetterTarget.model_validate({"kinesis": stream})


def kinesis_records(kinesis: KinesisEmulator, stream_name: str) -> list[Any]:
    """Every record in the target stream's one shard."""
    (shard,) = list_all_shards(kinesis.client, stream_name)
    iterator = kinesis.client.get_shard_iterator(
        StreamName=stream_name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    return list(kinesis.client.get_records(ShardIterator=iterator)["Records"])


def test_kinesis_target(kinesis: KinesisEmulator, stream_name: str) -> None:
    batch = failed_batch()
    writer_for(kinesis_target(kinesis, stream_name)).write(batch)
    records = kinesis_records(kinesis, stream_name)
    check([json.loads(r["Data"]) for r in records], batch)
    assert {r["PartitionKey"] for r in records} == {f"k{i}" for i in range(12)}


def test_sqs_target_in_batches_of_ten(moto: MotoServer) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="dead-letters")["QueueUrl"]
    target = {"sqs": {"queueURL": url, "region": REGION, "endpointURL": moto.endpoint_url}}
    batch = failed_batch()
    writer_for(DeadLetterTarget.model_validate(target)).write(batch)
    letters: list[dict[str, Any]] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        letters += [json.loads(m["Body"]) for m in messages]
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    check(letters, batch)


def test_s3_target_writes_one_object_per_batch_and_a_replay_overwrites_it(
    moto: MotoServer, tmp_path: Path
) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="failures")
    target = {
        "s3": {
            "bucket": "failures",
            "prefix": "orders/",
            "region": REGION,
            "endpointURL": moto.endpoint_url,
        }
    }
    writer = writer_for(DeadLetterTarget.model_validate(target))
    batch = failed_batch()
    writer.write(batch)
    writer.write(batch)  # dead-lettered again after a crash: the same object
    listed = s3.list_objects_v2(Bucket="failures")["Contents"]
    assert [o["Key"] for o in listed] == ["orders/ns/orders/shardId-000000000003/100-111.jsonl"]
    body = s3.get_object(Bucket="failures", Key=listed[0]["Key"])["Body"].read().decode()
    check([json.loads(line) for line in body.splitlines()], batch)


def test_a_target_that_refuses_raises_so_the_worker_retries(moto: MotoServer) -> None:
    target = {
        "sqs": {
            "queueURL": f"{moto.endpoint_url}/123456789012/no-such-queue",
            "region": REGION,
            "endpointURL": moto.endpoint_url,
        }
    }
    with pytest.raises(Exception, match=r"NonExistentQueue|QueueDoesNotExist"):
        writer_for(DeadLetterTarget.model_validate(target)).write(failed_batch(1))


def large_batch(*sizes: int) -> FailedBatch:
    records = [
        Record(bytes([65 + i]) * size, f"k{i}", str(200 + i)) for i, size in enumerate(sizes)
    ]
    return FailedBatch("ns/orders", "shardId-000000000003", records, "ValueError: bad", 4)


def sqs_target(moto: MotoServer, name: str, **attributes: str) -> tuple[Any, str, dict[str, Any]]:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    return sqs, url, {"queueURL": url, "region": REGION, "endpointURL": moto.endpoint_url}


def received(sqs: Any, url: str) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        letters += [json.loads(m["Body"]) for m in messages]
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return letters


def test_a_letter_over_the_queue_limit_is_refused_before_anything_is_sent(
    moto: MotoServer,
) -> None:
    """Issue 22.7: 200 KiB of data is over 256 KiB as a letter (base64 in JSON). The queue
    would refuse it on every retry; the writer says so once, sending nothing."""
    sqs, url, target = sqs_target(moto, "small-letters", MaximumMessageSize="262144")
    writer = writer_for(DeadLetterTarget.model_validate({"sqs": target}))
    with pytest.raises(LetterTooLarge, match=r"record 201 is \d+ bytes .* limit of 262144"):
        writer.write(large_batch(10, 200 * 1024))
    assert received(sqs, url) == []


def test_a_letter_too_large_for_the_queue_goes_to_the_s3_overflow(moto: MotoServer) -> None:
    sqs, url, target = sqs_target(moto, "with-overflow", MaximumMessageSize="262144")
    moto.client("s3").create_bucket(Bucket="large-letters")
    overflow = {"bucket": "large-letters", "region": REGION, "endpointURL": moto.endpoint_url}
    spec = {"sqs": target, "overflowS3": overflow}
    writer_for(DeadLetterTarget.model_validate(spec)).write(large_batch(10, 200 * 1024))
    assert [letter["sequenceNumber"] for letter in received(sqs, url)] == ["200"]
    s3 = moto.client("s3")
    (listed,) = s3.list_objects_v2(Bucket="large-letters")["Contents"]
    assert listed["Key"] == "ns/orders/shardId-000000000003/201-201.jsonl"
    body = s3.get_object(Bucket="large-letters", Key=listed["Key"])["Body"].read()
    (letter,) = [json.loads(line) for line in body.splitlines()]
    assert base64.b64decode(letter["data"]) == b"B" * 200 * 1024


def test_letters_are_sent_in_requests_within_the_batch_limit(moto: MotoServer) -> None:
    """Ten letters of about 150 KiB fit the queue one by one, not in one SendMessageBatch
    (1 MiB at most)."""
    sqs, url, target = sqs_target(moto, "many-letters")
    batch = large_batch(*[110 * 1024] * 10)
    writer_for(DeadLetterTarget.model_validate({"sqs": target})).write(batch)
    assert sorted(letter["sequenceNumber"] for letter in received(sqs, url)) == [
        str(200 + i) for i in range(10)
    ]


def test_a_letter_over_the_kinesis_record_limit_is_refused(
    kinesis: KinesisEmulator, stream_name: str
) -> None:
    """From about 780 KiB of data a letter is over Kinesis' 1 MiB."""
    writer = writer_for(kinesis_target(kinesis, stream_name))
    with pytest.raises(LetterTooLarge, match=r"record 200 is \d+ bytes .* limit of 1048576"):
        writer.write(large_batch(780 * 1024))
    writer.write(large_batch(760 * 1024))
    records = kinesis_records(kinesis, stream_name)
    assert [json.loads(r["Data"])["sequenceNumber"] for r in records] == ["200"]
