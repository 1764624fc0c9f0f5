"""DynamoDB Streams through boto3: a table's change stream behind the same interface as
Kinesis (`sources/base.py`); the kind itself is `sources/kinds/dynamodb_streams.py`.

What differs from Kinesis, and how it is handled here:
- Shards and lineage come from DescribeStream, paginated with ExclusiveStartShardId /
  LastEvaluatedShardId; a shard has at most one parent (DynamoDB never merges).
- A closed shard ends when GetRecords returns no NextShardIterator; there are no
  ChildShards in the answer (the children are listed by DescribeStream), and an open
  shard may answer empty pages while records wait further on, so "empty" never means
  "at the end".
- GetRecords reports no MillisBehindLatest: the lag is estimated from the records'
  ApproximateCreationDateTime (see `lag_millis`).
- There is no AT_TIMESTAMP iterator (the CRD refuses that initial position for a table
  stream). An AT_TIMESTAMP start the operator makes itself (e.g. LATEST resolved to the
  consumer's creation) is read from TRIM_HORIZON, leaving out the records created before
  that minute (`not_before`): ApproximateCreationDateTime is rounded down (to the second
  by the service, to the minute by DynamoDB Local), so a record is left out only when
  it is surely older; a few older ones may come too (at-least-once, never a loss).
- A table may have two streams (or more) at once: disabling a stream and enabling
  one (the only way to change its StreamViewType) makes a new stream; the old one stays
  readable for 24 hours. Every listing asks ListStreams again and lists them all, the
  new stream's first shards waiting for the old stream's last ones (see
  `DynamoDBStreamsSource`).
- Records carry the event name (INSERT / MODIFY / REMOVE), the item's keys and its new
  and old images (as the stream's view type provides them), turned into Python values
  by boto3's TypeDeserializer; `data` keeps the raw record as JSON.

Throttling and transient errors are botocore's (standard retry mode); an expired
iterator is replaced from the last record read, as for Kinesis. A position past the
stream's 24-hour retention (TrimmedDataAccessException) resumes at TRIM_HORIZON with a
warning: those records are gone for every reader."""

from __future__ import annotations

import base64
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Unpack, cast

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.aws import ReaderOptions, aws_error, reader_client
from streamconsumer.sources.base import Identity, ReadResult
from streamconsumer.sources.cursor import ShardCursor
from streamconsumer.sources.kinds.dynamodb_streams import DynamoDBStreamsSpec

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_dynamodbstreams.type_defs import RecordTypeDef, ShardTypeDef

MAX_RECORDS = 1000  # GetRecords' own limit for DynamoDB Streams
# A backlog probe walks at most this many empty pages before it calls a shard caught up.
PROBE_PAGES = 3

EXPIRED = "ExpiredIteratorException"
TRIMMED = "TrimmedDataAccessException"

_deserializer = TypeDeserializer()
log = logging.getLogger(__name__)


def streams_client(
    region: str | None = None, endpoint_url: str | None = None, **options: Unpack[ReaderOptions]
) -> DynamoDBStreamsClient:
    """A client as `reader_client` makes one."""
    return cast(
        "DynamoDBStreamsClient", reader_client("dynamodbstreams", region, endpoint_url, **options)
    )


class NoStreamError(RuntimeError):
    """The table has no stream (none enabled within the last 24 hours)."""


class ShardNotListed(LookupError):
    """No stream of the table lists the shard (any more)."""


@dataclass(frozen=True)
class TableStream:
    """A table's streams by table name (every stream DynamoDB still keeps for it: a
    disabled one stays readable for 24 hours beside the one enabled after it), or one
    stream by ARN."""

    table_name: str | None = None
    arn: str | None = None

    def __post_init__(self) -> None:
        if (self.table_name is None) == (self.arn is None):
            raise ValueError("give a table name or a stream ARN, not both")


def stream_arns(client: DynamoDBStreamsClient, stream: TableStream) -> list[str]:
    """The stream ARNs to read, oldest first: ListStreams for a table name (one call,
    asked anew at every listing, so a stream enabled since is noticed), else the ARN."""
    if stream.arn is not None:
        return [stream.arn]
    assert stream.table_name is not None
    found: list[tuple[str, str]] = []  # (label: the creation time, ISO 8601; ARN)
    params: dict[str, Any] = {"TableName": stream.table_name}
    while True:
        page = client.list_streams(**params)
        found += [(s.get("StreamLabel", ""), s["StreamArn"]) for s in page.get("Streams", [])]
        last = page.get("LastEvaluatedStreamArn")
        if not last:
            break
        params["ExclusiveStartStreamArn"] = last
    if not found:
        raise NoStreamError(
            f"table {stream.table_name} has no stream: enable one "
            "(StreamSpecification, StreamViewType NEW_AND_OLD_IMAGES)"
        )
    return [arn for _, arn in sorted(found)]


def last_shards(shards: list[Shard]) -> tuple[str, ...]:
    """A stream's shards that no other shard of it names as parent (its newest)."""
    parents = {parent for shard in shards for parent in shard.parents}
    return tuple(shard.id for shard in shards if shard.id not in parents)


def to_shard(raw: ShardTypeDef) -> Shard:
    sequences = raw.get("SequenceNumberRange", {})
    ending = sequences.get("EndingSequenceNumber")
    parent = raw.get("ParentShardId")
    return Shard(
        id=raw["ShardId"],
        parents=(parent,) if parent else (),
        closed=ending is not None,
        sequence_range=(sequences.get("StartingSequenceNumber", "0"), ending),
    )


def python_values(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A DynamoDB-typed item ({"id": {"S": "a"}}) as Python values ({"id": "a"}): numbers
    as Decimal, sets as sets, binaries as boto3's Binary."""
    if image is None:
        return None
    return {name: _deserializer.deserialize(value) for name, value in image.items()}


def _json_default(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, datetime):  # in UTC: botocore gives the reader's local zone
        return (value.astimezone(UTC) if value.tzinfo else value).isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def partition_key(keys: Mapping[str, Any]) -> str:
    """The item's key as one string (its typed form as canonical JSON): records of the
    same item share it, so "in order per key" can be checked and kept downstream."""
    return json.dumps(keys, sort_keys=True, separators=(",", ":"), default=_json_default)


def user_records(raw: Iterable[RecordTypeDef]) -> Iterator[Record]:
    for record in raw:
        change = record["dynamodb"]
        keys = change.get("Keys", {})
        created = change.get("ApproximateCreationDateTime")
        yield Record(
            data=json.dumps(record, sort_keys=True, default=_json_default).encode(),
            partition_key=partition_key(keys),
            sequence_number=change["SequenceNumber"],
            approximate_arrival_timestamp=created,
            checkpoint_sequence=change["SequenceNumber"],
            event_name=record.get("eventName"),
            keys=python_values(keys),
            new_image=python_values(change.get("NewImage")),
            old_image=python_values(change.get("OldImage")),
        )


def lag_millis(records: list[Record], now: Callable[[], float] = time.time) -> int:
    """How far behind a reader is, estimated from the newest record it read: now minus
    its creation time (the stream says no more; at least 1 ms while records arrive).
    A wall-clock difference between us and AWS: good for a lag metric and the
    autoscaler, never used for leases."""
    created = records[-1].approximate_arrival_timestamp
    if created is None:
        return 1
    stamp = created if created.tzinfo else created.replace(tzinfo=UTC)
    return max(1, int((now() - stamp.timestamp()) * 1000))


def not_before(position: StartPosition) -> datetime | None:
    """For an AT_TIMESTAMP start: the creation time (rounded down to the minute) before
    which a record surely came before the position; None for other starts."""
    if position.type is not StartPositionType.AT_TIMESTAMP or position.timestamp is None:
        return None
    stamp = position.timestamp
    stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return stamp.replace(second=0, microsecond=0)


def _created(record: Record) -> datetime | None:
    created = record.approximate_arrival_timestamp
    if created is None:
        return None
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def from_position(position: StartPosition) -> StartPosition:
    """The iterator position to read `position` from (AT_TIMESTAMP: TRIM_HORIZON)."""
    if position.type is StartPositionType.AT_TIMESTAMP:
        return StartPosition(type=StartPositionType.TRIM_HORIZON)
    return position


def shard_iterator(
    client: DynamoDBStreamsClient, arn: str, shard_id: str, position: StartPosition
) -> str:
    if position.type is StartPositionType.AT_TIMESTAMP:
        raise ValueError("DynamoDB Streams has no AT_TIMESTAMP iterator")
    params: dict[str, Any] = {
        "StreamArn": arn,
        "ShardId": shard_id,
        "ShardIteratorType": position.type.value,
    }
    if position.sequence_number is not None:
        params["SequenceNumber"] = position.sequence_number
    return str(client.get_shard_iterator(**params)["ShardIterator"])


class DynamoDBStreamsShardReader:
    def __init__(
        self,
        client: DynamoDBStreamsClient,
        stream_arn: Callable[[], str],
        shard_id: str,
        start: StartPosition,
        max_records: int = MAX_RECORDS,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.shard_id = shard_id
        self._client = client
        self._stream_arn = stream_arn  # asked once, at the first iterator
        self._arn: str | None = None
        self._max_records = min(max_records, MAX_RECORDS)
        self._now = now
        self._cursor = ShardCursor(
            from_position(start),
            open_at=self._iterator_at,
            get_records=client.get_records,
            limit=self._max_records,
            # Expired (15 minutes) or trimmed under our iterator: a fresh one, once a read.
            renewable={EXPIRED, TRIMMED},
            max_renewals=1,
        )
        self._not_before = not_before(start)  # AT_TIMESTAMP: leave out what came before
        self._ended: ReadResult | None = None

    def _iterator_at(self, position: StartPosition) -> str:
        if self._arn is None:
            self._arn = self._stream_arn()
        arn = self._arn
        try:
            return shard_iterator(self._client, arn, self.shard_id, position)
        except ClientError as error:
            if aws_error(error).code != TRIMMED or position.type is StartPositionType.TRIM_HORIZON:
                raise
        # The records after our position left the stream (24-hour retention): nobody can
        # read them any more. Go on from the oldest record still there, loudly (Kinesis
        # does the same without saying so).
        log.warning(
            "%s: records after %s are past the stream's retention; resuming at TRIM_HORIZON",
            self.shard_id,
            position.sequence_number or position.type.value,
        )
        trim_horizon = StartPosition(type=StartPositionType.TRIM_HORIZON)
        return shard_iterator(self._client, arn, self.shard_id, trim_horizon)

    def read(self) -> ReadResult:
        """`ShardReader.read`; records created before an AT_TIMESTAMP start are left out."""
        if self._ended is not None:
            return self._ended
        response = self._cursor.read()
        records = list(user_records(response.get("Records", [])))
        more = self._cursor.advance(records, response.get("NextShardIterator"))
        if self._not_before is not None:
            records = self._from_timestamp(records)
        if not more:  # a closed shard, read to its end
            self._ended = ReadResult([], 0, shard_end=True)
            return ReadResult(records, 0, shard_end=True)
        return ReadResult(records, lag_millis(records, self._now) if records else 0)

    def _from_timestamp(self, records: list[Record]) -> list[Record]:
        """Leaves out the records surely created before an AT_TIMESTAMP start; from the
        first one kept on, every record is kept (the stream's order rules)."""
        for index, record in enumerate(records):
            created = _created(record)
            if created is None or self._not_before is None or created >= self._not_before:
                self._not_before = None
                return records[index:]
        return []


class DynamoDBStreamsSource:
    """Shards of every stream of a table, the older streams' first. A table's stream
    disabled and enabled again (to change its StreamViewType) is a new stream with new
    shard ids; the old one stays readable for 24 hours. The new stream's first shards
    wait for the old stream's last ones (`Shard.waits_for`), so parents-first ordering
    reads the old tail to its end before the new stream starts, and an operator started
    meanwhile still lists the old shards (their leases are not dropped as expired).
    Shard ids name the shard across streams (a creation time in milliseconds and a
    random part); the listing refuses a shard id that two streams list."""

    def __init__(
        self,
        client: DynamoDBStreamsClient,
        stream: TableStream,
        max_records: int = MAX_RECORDS,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.stream = stream
        self.max_records = max_records
        self._now = now
        self._stream_of: dict[str, str] = {}  # shard id -> its stream's ARN (last listing)
        self._relisting = threading.Lock()

    def list_shards(self, page_size: int | None = None) -> list[Shard]:
        """Every shard DescribeStream lists for each stream (open and closed, within the
        24 h retention), page after page."""
        shards: list[Shard] = []
        stream_of: dict[str, str] = {}
        before: tuple[str, ...] = ()  # the previous stream's last shards
        for arn in stream_arns(self.client, self.stream):
            listed = self._described(arn, page_size)
            for shard in listed:
                if shard.id in stream_of:
                    raise ValueError(
                        f"shard {shard.id} is listed by two streams: {stream_of[shard.id]}, {arn}"
                    )
                stream_of[shard.id] = arn
            shards += [s if s.parents else replace(s, waits_for=before) for s in listed]
            before = last_shards(listed) or before
        self._stream_of = stream_of
        return shards

    def _described(self, arn: str, page_size: int | None) -> list[Shard]:
        shards: list[Shard] = []
        params: dict[str, Any] = {"StreamArn": arn}
        if page_size:
            params["Limit"] = page_size
        while True:
            description = self.client.describe_stream(**params)["StreamDescription"]
            shards.extend(to_shard(raw) for raw in description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            params["ExclusiveStartShardId"] = last

    def stream_of(self, shard_id: str) -> str:
        """The ARN of the stream that lists `shard_id`: from the last listing, or from a
        new one (a worker's first reader, or a shard of a stream enabled since)."""
        if self.stream.arn is not None:
            return self.stream.arn
        with self._relisting:  # readers starting together list once
            if shard_id not in self._stream_of:
                self.list_shards()
        arn = self._stream_of.get(shard_id)
        if arn is None:
            raise ShardNotListed(
                f"{shard_id}: no stream of table {self.stream.table_name} lists it "
                "(past the 24-hour retention?)"
            )
        return arn

    def incarnation(self) -> None:
        """None: shard ids carry their creation time and never repeat, so checkpoints of
        a table deleted and created again name no shard its new stream lists."""
        return None

    def open_reader(self, shard_id: str, start: StartPosition) -> DynamoDBStreamsShardReader:
        return DynamoDBStreamsShardReader(
            self.client,
            functools.partial(self.stream_of, shard_id),
            shard_id,
            start,
            self.max_records,
            self._now,
        )

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        """Milliseconds behind for a reader starting at `start`, None when nothing waits.
        Reads at most one record, through at most PROBE_PAGES pages (an open shard may
        answer empty pages before its records). A closed shard at its end still needs a
        worker to finish it: at least 1 ms, or the backlog of the shards waiting for it
        (DynamoDB Streams gives no ChildShards: they are the listed shards naming it as
        parent, and a newer stream's first shards)."""
        arn = self.stream_of(shard_id)
        iterator: str | None = shard_iterator(self.client, arn, shard_id, from_position(start))
        earliest = not_before(start)
        for _ in range(PROBE_PAGES):
            if iterator is None:
                break
            response = self.client.get_records(ShardIterator=iterator, Limit=1)
            records = list(user_records(response.get("Records", [])))
            if records:
                lag = lag_millis(records, self._now)
                if earliest is not None:  # nothing before the start waits for us
                    lag = min(lag, max(1, int((self._now() - earliest.timestamp()) * 1000)))
                return lag
            iterator = response.get("NextShardIterator")
        if iterator is not None:
            return None  # open, and nothing found within the probe
        trim_horizon = StartPosition(type=StartPositionType.TRIM_HORIZON)
        waiting = [s.id for s in self.list_shards() if shard_id in (*s.parents, *s.waits_for)]
        return max([1, *(self.backlog(child, trim_horizon) or 0 for child in waiting)])


# --- from a spec -------------------------------------------------------------------------


def source(
    spec: DynamoDBStreamsSpec, max_records: int = MAX_RECORDS, identity: Identity = None
) -> DynamoDBStreamsSource:
    return DynamoDBStreamsSource(
        streams_client(spec.region, spec.endpoint_url, identity=identity),
        TableStream(table_name=spec.table_name, arn=spec.stream_arn),
        max_records=max_records,
    )
