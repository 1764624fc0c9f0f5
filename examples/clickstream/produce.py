"""Puts clickstream events on a Kinesis stream without end, for the quickstart (and any
stream of yours): `python -m clickstream.produce`, in the example's image.

It creates the stream if it is missing (waiting for the endpoint to answer first), then
puts a batch of `events.make_events` every interval, each under its user as the
partition key, and logs how many it has put. Settings from the environment:
KINESIS_ENDPOINT_URL (unset: AWS), AWS_REGION, STREAM_NAME (clickstream), SHARDS (2, for
a stream it creates), EVENTS_PER_BATCH (20), INTERVAL_SECONDS (1)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from clickstream.events import make_events

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

log = logging.getLogger("clickstream.produce")


def ensure_stream(client: KinesisClient, stream: str, shards: int, wait: float = 1.0) -> None:
    """Creates `stream` unless it exists and returns once it is ACTIVE; until the endpoint
    answers (an emulator still starting), it keeps trying."""
    while True:
        try:
            try:
                client.create_stream(StreamName=stream, ShardCount=shards)
                log.info("created stream %s with %d shards", stream, shards)
            except client.exceptions.ResourceInUseException:
                pass  # it exists
            summary = client.describe_stream_summary(StreamName=stream)
            if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                return
        except (BotoCoreError, ClientError) as error:
            log.info("waiting for stream %s: %s", stream, error)
        time.sleep(wait)


def records(count: int, seed: int) -> list[PutRecordsRequestEntryTypeDef]:
    """`count` events of the last five minutes, each keyed by its user."""
    start = datetime.now(UTC) - timedelta(minutes=5)
    return [
        {"Data": event, "PartitionKey": json.loads(event)["user"]}
        for event in make_events(count, seed, start=start)
    ]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stream = os.environ.get("STREAM_NAME", "clickstream")
    per_batch = int(os.environ.get("EVENTS_PER_BATCH", "20"))
    interval = float(os.environ.get("INTERVAL_SECONDS", "1"))
    client = boto3.client(
        "kinesis",
        endpoint_url=os.environ.get("KINESIS_ENDPOINT_URL") or None,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
    )
    ensure_stream(client, stream, int(os.environ.get("SHARDS", "2")))
    put = 0
    for seed in itertools.count():
        try:
            answer = client.put_records(StreamName=stream, Records=records(per_batch, seed))
        except (BotoCoreError, ClientError) as error:
            log.warning("put failed, trying again: %s", error)
        else:
            put += per_batch - answer["FailedRecordCount"]  # failed ones are not retried
            log.info("put %d events to %s", put, stream)
        time.sleep(interval)


if __name__ == "__main__":
    main()
