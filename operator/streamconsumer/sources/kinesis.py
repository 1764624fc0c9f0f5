"""Kinesis Data Streams through boto3: shard listing with lineage, iterators for every
start position, a GetRecords reader with shard-end detection, throttling back-off,
expired-iterator recovery and KPL de-aggregation."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aws_kinesis_agg
import boto3
from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from botocore.config import Config
from botocore.exceptions import ClientError

from streamconsumer.core.backoff import Backoff
from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import RecordTypeDef, ShardTypeDef

THROTTLED = {"ProvisionedThroughputExceededException", "LimitExceededException"}
_MAGIC: bytes = aws_kinesis_agg.MAGIC


def kinesis_client(region: str | None = None, endpoint_url: str | None = None) -> KinesisClient:
    """A client that leaves throttling to our own back-off (so it is visible and bounded
    by lease duration) but keeps botocore's retries for connection errors."""
    config = Config(retries={"mode": "standard", "max_attempts": 3}, tcp_keepalive=True)
    return boto3.client("kinesis", region_name=region, endpoint_url=endpoint_url, config=config)


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


def retrying(call: Callable[[], Any], backoff: Backoff, sleep: Callable[[float], None]) -> Any:
    """Runs `call`, waiting out throttling with jittered back-off."""
    attempt = 0
    while True:
        try:
            return call()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in THROTTLED:
                raise
            sleep(backoff.delay(attempt))
            attempt += 1


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
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.shard_id = shard_id
        self._client = client
        self._stream = stream
        self._start = start
        self._max_records = max_records
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._iterator: str | None = None
        self._last_sequence = start.sequence_number  # last record read (for recovery)
        self._ended: ReadResult | None = None

    def _new_iterator(self) -> str:
        params: dict[str, Any] = {**self._stream.params(), "ShardId": self.shard_id}
        if self._last_sequence is not None:
            params["ShardIteratorType"] = StartPositionType.AFTER_SEQUENCE_NUMBER.value
            params["StartingSequenceNumber"] = self._last_sequence
        else:
            params["ShardIteratorType"] = self._start.type.value
            if self._start.type is StartPositionType.AT_TIMESTAMP:
                params["Timestamp"] = self._start.timestamp
        response = retrying(
            lambda: self._client.get_shard_iterator(**params), self._backoff, self._sleep
        )
        return str(response["ShardIterator"])

    def read(self) -> ReadResult:
        if self._ended is not None:
            return self._ended
        attempt = 0
        while True:
            try:
                if self._iterator is None:
                    self._iterator = self._new_iterator()
                response = self._client.get_records(
                    ShardIterator=self._iterator, Limit=self._max_records
                )
                break
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code")
                if code == "ExpiredIteratorException":
                    self._iterator = None  # resume right after the last record read
                elif code in THROTTLED:
                    self._sleep(self._backoff.delay(attempt))
                    attempt += 1
                else:
                    raise
        records = list(user_records(response["Records"], self._last_sequence))
        if records:
            self._last_sequence = records[-1].sequence_number
        self._iterator = response.get("NextShardIterator")
        result = ReadResult(records, response.get("MillisBehindLatest"))
        if self._iterator is None:
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            self._ended = ReadResult([], 0, shard_end=True, child_shards=children)
            result = ReadResult(records, 0, shard_end=True, child_shards=children)
        return result


class KinesisSource:
    def __init__(
        self,
        client: KinesisClient,
        stream: StreamRef,
        max_records: int = 1000,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.stream = stream
        self.max_records = max_records
        self._backoff = backoff or Backoff()
        self._sleep = sleep

    def list_shards(self, page_size: int | None = None) -> list[Shard]:
        paging = {"MaxResults": page_size} if page_size else {}
        shards: list[Shard] = []
        params: dict[str, Any] = {**self.stream.params(), **paging}
        while True:
            response = retrying(
                lambda p=params: self.client.list_shards(**p),  # type: ignore[misc]
                self._backoff,
                self._sleep,
            )
            shards.extend(to_shard(raw) for raw in response["Shards"])
            token = response.get("NextToken")
            if not token:
                return shards
            # With a NextToken, ListShards refuses the stream name.
            params = {"NextToken": token, **paging}

    def open_reader(self, shard_id: str, start: StartPosition) -> KinesisShardReader:
        return KinesisShardReader(
            self.client, self.stream, shard_id, start, self.max_records, self._backoff, self._sleep
        )
