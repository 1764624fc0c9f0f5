"""`streamconsumer deadletters list|show|redrive` (issue 43), the real command in a process
of its own, on letters the worker's own writers put in each target: SQS and S3 on moto's
server, Kinesis on its emulator. Redriven records reach the manifest's processor with
their shard and sequence, in their shard's order; a second run finds nothing; another
consumer's letters are never touched; a record that fails again stops its shard there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamconsumer.deadletter import FailedBatch, writer_for
from streamconsumer.models.failure import DeadLetterTarget
from streamconsumer.processor import Record
from testbed.kinesis import KinesisEmulator, create_stream, list_all_shards
from testbed.moto import REGION, MotoServer
from testbed.redrive_app import OUT_ENV

REPO = Path(__file__).resolve().parents[2]
SHARDS = ("shardId-000000000001", "shardId-000000000002")

pytestmark = pytest.mark.usefixtures("credentials")


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer.start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def batch(shard: str, first: int, count: int, consumer: str = "team/orders") -> FailedBatch:
    records = [
        Record(f"{shard[-1]}-{n}".encode(), f"key-{n % 3}", str(first + n)) for n in range(count)
    ]
    return FailedBatch(consumer, shard, records, "ValueError: bad row", 3)


def poisoned(shard: str) -> FailedBatch:
    records = [Record(data, "k", str(500 + n)) for n, data in enumerate((b"ok", b"poison", b"x"))]
    return FailedBatch("team/orders", shard, records, "ValueError: still poison", 3)


def target_of(kind: str, moto: MotoServer, kinesis: KinesisEmulator, name: str) -> dict[str, Any]:
    if kind == "sqs":
        url = moto.client("sqs").create_queue(QueueName=name)["QueueUrl"]
        return {"sqs": {"queueURL": url, "region": REGION, "endpointURL": moto.endpoint_url}}
    if kind == "s3":
        moto.client("s3").create_bucket(Bucket=name)
        where = {"bucket": name, "prefix": "dead/", "endpointURL": moto.endpoint_url}
        return {"s3": {**where, "region": REGION}}
    create_stream(kinesis.client, name, 2)
    where = {"streamName": name, "endpointURL": kinesis.endpoint_url}
    return {"kinesis": {**where, "region": REGION}}


def manifest(tmp_path: Path, target: dict[str, Any]) -> Path:
    body = {
        "apiVersion": "streamconsumer.io/v1alpha1",
        "kind": "StreamConsumer",
        "metadata": {"name": "orders", "namespace": "team"},
        "spec": {
            "source": {"kinesis": {"streamName": "orders"}},
            "processor": {
                "image": "orders:1",
                "entrypoint": "testbed.redrive_app:Collect",
                "onFailure": {"then": "deadLetter", "deadLetter": target},
            },
        },
    }
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def command(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")])
        ),
        OUT_ENV: str(tmp_path / "taken.jsonl"),
        "AWS_DEFAULT_REGION": REGION,
        "COLUMNS": "200",
        **env,
    }
    argv = [sys.executable, "-m", "streamconsumer.cli", "deadletters", *args]
    return subprocess.run(
        argv, env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def taken(tmp_path: Path) -> list[list[str]]:
    out = tmp_path / "taken.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


@pytest.mark.parametrize("kind", ["sqs", "s3", "kinesis"])
def test_letters_are_listed_shown_and_redriven_to_the_processor_once(
    kind: str, moto: MotoServer, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    target = target_of(kind, moto, kinesis, stream_name)
    writer = writer_for(DeadLetterTarget.model_validate(target))
    writer.write(batch(SHARDS[1], 300, 4))
    writer.write(batch(SHARDS[0], 100, 5))
    writer.write(batch(SHARDS[0], 105, 2))
    writer.write(batch(SHARDS[0], 900, 2, consumer="team/other"))  # not ours
    path = str(manifest(tmp_path, target))

    listed = command(tmp_path, "list", "--for", path)
    assert listed.returncode == 0, listed.stderr
    assert "11 dead letters of team/orders" in listed.stdout
    assert SHARDS[0] in listed.stdout
    assert "ValueError: bad row" in listed.stdout
    capped = command(tmp_path, "list", "--for", path, "--max", "3")
    assert "3 dead letters of team/orders" in capped.stdout
    assert "(and more: --max 3 read no further)" in capped.stdout
    shown = command(tmp_path, "show", "--for", path, SHARDS[1], "302")
    assert shown.returncode == 0, shown.stderr
    letter = json.loads(shown.stdout)
    assert (letter["data"], letter["partitionKey"], letter["attempts"]) == ("2-2", "key-2", 3)

    redriven = command(tmp_path, "redrive", "--for", path, "--batch", "3")
    assert redriven.returncode == 0, redriven.stderr
    print(redriven.stdout)
    assert "redrove 11 of 11 dead letters" in redriven.stdout
    expected = [
        [shard, str(first + n), f"key-{n % 3}", f"{shard[-1]}-{n}"]
        for shard, first, count in ((SHARDS[0], 100, 5), (SHARDS[0], 105, 2), (SHARDS[1], 300, 4))
        for n in range(count)
    ]
    assert taken(tmp_path) == expected, "each shard's records in order, with shard and sequence"

    again = command(tmp_path, "redrive", "--for", path)
    assert again.returncode == 0, again.stderr
    assert "no dead letters of team/orders" in again.stdout
    assert len(taken(tmp_path)) == 11, "nothing redriven twice"
    others = command(tmp_path, "list", "--for", path, "-n", "ignored")
    assert "0 dead letters" in others.stdout
    manifest_of_other = tmp_path / "other.yaml"
    body = yaml.safe_load(Path(path).read_text())
    body["metadata"]["name"] = "other"
    manifest_of_other.write_text(yaml.safe_dump(body))
    theirs = command(tmp_path, "list", "--for", str(manifest_of_other))
    assert "2 dead letters of team/other" in theirs.stdout, "another consumer's stay"


def test_a_record_that_fails_again_stops_its_shard_there_and_stays(
    moto: MotoServer, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    target = target_of("sqs", moto, kinesis, stream_name)
    writer = writer_for(DeadLetterTarget.model_validate(target))
    writer.write(poisoned(SHARDS[0]))
    writer.write(batch(SHARDS[1], 300, 2))
    path = str(manifest(tmp_path, target))

    redriven = command(tmp_path, "redrive", "--for", path, "--batch", "1")
    assert redriven.returncode == 1
    assert "redrove 3 of 5" in redriven.stdout
    assert f"{SHARDS[0]}: stopped, ValueError: still poison" in redriven.stdout
    assert [row[1] for row in taken(tmp_path)] == ["500", "300", "301"]
    left = command(tmp_path, "list", "--for", path)
    assert "2 dead letters of team/orders" in left.stdout, "the poison and what follows it"


def test_letters_redriven_to_a_stream_keep_their_keys(
    moto: MotoServer, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    target = target_of("s3", moto, kinesis, stream_name)
    writer_for(DeadLetterTarget.model_validate(target)).write(batch(SHARDS[0], 100, 6))
    replay = f"{stream_name}-replay"
    create_stream(kinesis.client, replay, 1)
    path = str(manifest(tmp_path, target))

    redriven = command(
        tmp_path,
        "redrive",
        "--for",
        path,
        "--to-stream",
        replay,
        AWS_ENDPOINT_URL_KINESIS=kinesis.endpoint_url,
    )
    assert redriven.returncode == 0, redriven.stderr
    assert f"redrove 6 of 6 dead letters to the stream {replay}" in redriven.stdout
    (shard,) = list_all_shards(kinesis.client, replay)
    iterator = kinesis.client.get_shard_iterator(
        StreamName=replay, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = kinesis.client.get_records(ShardIterator=iterator)["Records"]
    assert [(r["PartitionKey"], r["Data"]) for r in records] == [
        (f"key-{n % 3}", f"1-{n}".encode()) for n in range(6)
    ]
    assert taken(tmp_path) == [], "not to the processor"
    assert "no dead letters" in command(tmp_path, "redrive", "--for", path).stdout


def test_a_manifest_without_a_target_is_a_clear_error(tmp_path: Path) -> None:
    path = manifest(tmp_path, {})
    body = yaml.safe_load(path.read_text())
    del body["spec"]["processor"]["onFailure"]
    path.write_text(yaml.safe_dump(body))
    result = command(tmp_path, "list", "--for", str(path))
    assert result.returncode == 1
    assert "team/orders has no dead-letter target" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_letter_sent_twice_is_redriven_once_and_hostile_messages_are_passed_by(
    moto: MotoServer, kinesis: KinesisEmulator, stream_name: str, tmp_path: Path
) -> None:
    target = target_of("sqs", moto, kinesis, stream_name)
    writer = writer_for(DeadLetterTarget.model_validate(target))
    writer.write(batch(SHARDS[0], 100, 2))
    writer.write(batch(SHARDS[0], 100, 2))  # SQS delivers at least once; a writer retried
    sqs, url = moto.client("sqs"), target["sqs"]["queueURL"]
    for hostile in (
        {"consumer": "team/orders", "shardId": "s[/]", "sequenceNumber": "1", "data": "!"},
        {
            "consumer": "team/orders",
            "shardId": "s",
            "sequenceNumber": 1.5,
            "data": "",
            "partitionKey": "k",
        },
        "[/bold] not json",
    ):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(hostile))
    path = str(manifest(tmp_path, target))

    listed = command(tmp_path, "list", "--for", path)
    assert listed.returncode == 0, listed.stderr
    assert "4 dead letters of team/orders" in listed.stdout
    redriven = command(tmp_path, "redrive", "--for", path)
    assert redriven.returncode == 0, redriven.stderr
    assert [row[1] for row in taken(tmp_path)] == ["100", "101"], "each record once"
    visible = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert visible == {
        "ApproximateNumberOfMessages": "3",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }, "the others are neither deleted nor left hidden"


@pytest.mark.parametrize(
    "text",
    [
        "not: [yaml",
        "- a list",
        "kind: StreamConsumer\nmetadata: [1]",
        "kind: StreamConsumer\nmetadata: {name: ../up}\nspec: {}",
    ],
)
def test_a_bad_manifest_is_one_line_not_a_traceback(text: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = command(tmp_path, "list", "--for", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith("streamconsumer: "), result.stderr
    assert "Traceback" not in result.stderr
