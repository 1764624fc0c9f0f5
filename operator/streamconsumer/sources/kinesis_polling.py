"""Kinesis Data Streams read by polling, through boto3: shard listing with lineage,
iterators for every start position, a GetRecords reader with shard-end detection,
expired-iterator recovery and KPL de-aggregation, and a backlog probe for shards nobody
reads.

Throttling and transient errors are botocore's: its standard retry mode retries
ProvisionedThroughputExceeded and LimitExceeded with jittered exponential back-off.
What still fails after that reaches the caller, which pauses the shard and tries again."""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Unpack, cast

import aws_kinesis_agg
from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from botocore.exceptions import ClientError

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.aws import ReaderOptions, aws_error, reader_client
from streamconsumer.sources.base import ReadResult
from streamconsumer.sources.cursor import ShardCursor

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import RecordTypeDef, ShardTypeDef

_MAGIC: bytes = aws_kinesis_agg.MAGIC
EXPIRED = "ExpiredIteratorException"  # an iterator lives 5 minutes


def kinesis_client(
    region: str | None = None, endpoint_url: str | None = None, **options: Unpack[ReaderOptions]
) -> KinesisClient:
    """A client as `reader_client` makes one."""
    return cast("KinesisClient", reader_client("kinesis", region, endpoint_url, **options))


@dataclass(frozen=True)
class StreamRef:
    """A stream by name or by ARN: Kinesis takes either, never both."""

    name: str | None = None
    arn: str | None = None

    def __post_init__(self) -> None:
        if (self.name is None) == (self.arn is None):
            raise ValueError("give a stream name or an ARN, not both")

    def params(self) -> dict[str, str]:
        return {"StreamARN": self.arn} if self.arn else {"StreamName": self.name or ""}


def to_shard(raw: ShardTypeDef) -> Shard:
    parents = tuple(p for p in (raw.get("ParentShardId"), raw.get("AdjacentParentShardId")) if p)
    hashes = raw["HashKeyRange"]
    sequences = raw["SequenceNumberRange"]
    ending = sequences.get("EndingSequenceNumber")
    return Shard(
        id=raw["ShardId"],
        parents=parents,
        closed=ending is not None,
        hash_range=(int(hashes["StartingHashKey"]), int(hashes["EndingHashKey"])),
        sequence_range=(sequences["StartingSequenceNumber"], ending),
    )


def user_records(raw: Iterable[RecordTypeDef], previous: str | None) -> Iterator[Record]:
    """Kinesis records as user records, KPL aggregates unpacked. `previous` is the sequence
    number of the last complete record before these (where a checkpoint may rest)."""
    for record in raw:
        data = record["Data"]
        sequence = record["SequenceNumber"]
        arrival = record.get("ApproximateArrivalTimestamp")
        if data[: len(_MAGIC)] != _MAGIC:
            yield Record(
                data=data,
                partition_key=record["PartitionKey"],
                sequence_number=sequence,
                approximate_arrival_timestamp=arrival,
                explicit_hash_key=None,
                checkpoint_sequence=sequence,
            )
        else:
            parts = list(iter_deaggregate_records([dict(record)], data_format="Boto3"))
            for index, part in enumerate(parts):
                fields = part["kinesis"]
                aggregated = bool(fields.get("aggregated"))
                last = index == len(parts) - 1
                yield Record(
                    data=base64.b64decode(fields["data"]) if aggregated else fields["data"],
                    partition_key=fields["partitionKey"],
                    sequence_number=sequence,
                    approximate_arrival_timestamp=arrival,
                    sub_sequence_number=fields.get("subSequenceNumber"),
                    explicit_hash_key=fields.get("explicitHashKey"),
                    # Resuming after `sequence` would skip the aggregate's remaining parts.
                    checkpoint_sequence=sequence if last else previous,
                )
        previous = sequence


class KinesisShardReader:
    def __init__(
        self,
        client: KinesisClient,
        stream: StreamRef,
        shard_id: str,
        start: StartPosition,
        max_records: int = 1000,
    ) -> None:
        self.shard_id = shard_id
        self._cursor = ShardCursor(
            start,
            open_at=functools.partial(shard_iterator, client, stream, shard_id),
            get_records=client.get_records,
            limit=max_records,
            # An expired iterator (5 minutes unused): a fresh one, once a read. A second
            # refusal reaches the caller, who pauses the shard: a service that kept
            # refusing fresh iterators must not spin this thread (an adversarial review
            # found it looping without end).
            renewable={EXPIRED},
            max_renewals=1,
        )
        self._ended: ReadResult | None = None

    def read(self) -> ReadResult:
        """`ShardReader.read`: botocore retries throttling; what it could not retry away
        reaches the caller."""
        if self._ended is not None:
            return self._ended
        response = self._cursor.read()
        records = list(user_records(response["Records"], self._cursor.last_sequence))
        behind = response.get("MillisBehindLatest")
        result = ReadResult(records, behind, at_tip=behind == 0)
        if not self._cursor.advance(records, response.get("NextShardIterator")):
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            self._ended = ReadResult([], 0, shard_end=True, child_shards=children)
            result = ReadResult(records, 0, shard_end=True, child_shards=children)
        return result


def shard_iterator(
    client: KinesisClient, stream: StreamRef, shard_id: str, position: StartPosition
) -> str:
    params: dict[str, Any] = {
        **stream.params(),
        "ShardId": shard_id,
        "ShardIteratorType": position.type.value,
    }
    if position.sequence_number is not None:
        params["StartingSequenceNumber"] = position.sequence_number
    if position.timestamp is not None:
        params["Timestamp"] = position.timestamp
    try:
        return str(client.get_shard_iterator(**params)["ShardIterator"])
    except ClientError as error:
        if not in_the_future(error, position):
            raise
    # Kinesis' clock is behind ours: nothing has arrived at or after the timestamp yet,
    # so reading from the tip skips nothing.
    latest = StartPosition(type=StartPositionType.LATEST)
    return shard_iterator(client, stream, shard_id, latest)


def in_the_future(error: ClientError, position: StartPosition) -> bool:
    code, message = aws_error(error)
    return (
        position.type is StartPositionType.AT_TIMESTAMP
        and code == "InvalidArgumentException"
        and "cannot be greater than the current" in message
    )


class KinesisSource:
    def __init__(self, client: KinesisClient, stream: StreamRef, max_records: int = 1000) -> None:
        self.client = client
        self.stream = stream
        self.max_records = max_records

    def list_shards(self, page_size: int | None = None) -> list[Shard]:
        paging = {"MaxResults": page_size} if page_size else {}
        shards: list[Shard] = []
        params: dict[str, Any] = {**self.stream.params(), **paging}
        while True:
            response = self.client.list_shards(**params)
            shards.extend(to_shard(raw) for raw in response["Shards"])
            token = response.get("NextToken")
            if not token:
                return shards
            # With a NextToken, ListShards refuses the stream name.
            params = {"NextToken": token, **paging}

    def open_reader(self, shard_id: str, start: StartPosition) -> KinesisShardReader:
        return KinesisShardReader(self.client, self.stream, shard_id, start, self.max_records)

    def incarnation(self) -> str:
        """The stream's ARN and creation time: a stream deleted and created again under
        its name has the same ARN and shard ids, and none of its records."""
        summary = self.client.describe_stream_summary(**self.stream.params())
        described = summary["StreamDescriptionSummary"]
        # Milliseconds, in UTC: what the API carries, whatever a parser makes of it.
        when = described["StreamCreationTimestamp"].astimezone(UTC)
        created = when.isoformat(timespec="milliseconds")
        return f"{described['StreamARN']} created {created}"

    def aggregate_at(self, shard_id: str, sequence: str) -> tuple[int, datetime]:
        """How many user records the record at `sequence` holds (1 unless a KPL
        aggregate), and when it arrived: where a KCL checkpoint inside it resumes."""
        params: dict[str, Any] = {
            **self.stream.params(),
            "ShardId": shard_id,
            "ShardIteratorType": "AT_SEQUENCE_NUMBER",
            "StartingSequenceNumber": sequence,
        }
        gone = f"shard {shard_id} holds no record {sequence} (past retention?)"
        try:
            iterator = self.client.get_shard_iterator(**params)["ShardIterator"]
        except ClientError as error:
            code, message = aws_error(error)
            if code in ("ResourceNotFoundException", "InvalidArgumentException"):
                raise LookupError(f"{gone}: {message}") from None
            raise
        records = self.client.get_records(ShardIterator=iterator, Limit=1)["Records"]
        if not records or records[0]["SequenceNumber"] != sequence:
            raise LookupError(gone)
        return len(list(user_records(records, None))), records[0]["ApproximateArrivalTimestamp"]

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        """How far behind the tip a reader starting at `start` would be (milliseconds),
        None when nothing waits there. Reads at most one record per shard. A closed shard
        read to its end still needs a worker to finish it, and its children wait behind
        it: their backlog is its own (at least 1 ms)."""
        iterator = shard_iterator(self.client, self.stream, shard_id, start)
        response = self.client.get_records(ShardIterator=iterator, Limit=1)
        if response["Records"]:
            return max(1, int(response.get("MillisBehindLatest") or 0))
        if response.get("NextShardIterator"):
            return None  # open, and caught up
        trim_horizon = StartPosition(type=StartPositionType.TRIM_HORIZON)
        children = [c["ShardId"] for c in response.get("ChildShards", [])]
        return max([1, *(self.backlog(child, trim_horizon) or 0 for child in children)])
