"""Kinesis' own reader behaviour the emulators cannot provoke on demand (botocore's
Stubber at the boto3 boundary). What the Kinesis reader shares with DynamoDB Streams'
(throttling, expired iterators) is in test_shard_readers.py."""

from __future__ import annotations

from botocore.stub import Stubber

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.sources.kinesis import KinesisSource, StreamRef

from .reader_kinds import KINESIS

HASHES = {"StartingHashKey": "0", "EndingHashKey": "1"}


def test_backlog_of_a_closed_shard_at_its_end_is_its_childrens() -> None:
    """An unfinished closed shard with nothing left still needs a worker, and its
    children's records wait behind it: the autoscaler must see that backlog."""
    client = KINESIS.stubbed_client()
    stubber = Stubber(client)
    source = KinesisSource(client, StreamRef(name="s"))
    after = StartPosition(type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number="9")
    stubber.add_response("get_shard_iterator", {"ShardIterator": "p"})
    stubber.add_response(
        "get_records",
        {
            "Records": [],
            "ChildShards": [
                {"ShardId": "c1", "ParentShards": ["s0"], "HashKeyRange": HASHES},
                {"ShardId": "c2", "ParentShards": ["s0"], "HashKeyRange": HASHES},
            ],
        },
    )
    stubber.add_response("get_shard_iterator", {"ShardIterator": "c1"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "c1-2"})
    stubber.add_response("get_shard_iterator", {"ShardIterator": "c2"})
    stubber.add_response(
        "get_records",
        {"Records": [KINESIS.record(12)], "NextShardIterator": "c2-2", "MillisBehindLatest": 4000},
    )
    with stubber:
        assert source.backlog("s0", after) == 4000
    stubber = Stubber(client)
    source = KinesisSource(client, StreamRef(name="s"))
    stubber.add_response("get_shard_iterator", {"ShardIterator": "open"})
    stubber.add_response("get_records", {"Records": [], "NextShardIterator": "open-2"})
    with stubber:
        assert source.backlog("s1", after) is None, "open and caught up"
