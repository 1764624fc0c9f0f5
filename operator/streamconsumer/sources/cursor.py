"""A GetRecords reader's place in its shard, kept one way for every kind of stream: the
iterator the last page handed on, and the last record read. A fresh iterator, opened
right after that record (at the reader's start before any), replaces a missing one
(the first read, or after an error) and one the service refuses with an error code the
kind calls renewable (an iterator expires; DynamoDB Streams may trim under it)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Generic, Protocol, TypeVar

from botocore.exceptions import ClientError

from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.aws import aws_error

Page = TypeVar("Page")
Page_co = TypeVar("Page_co", covariant=True)


class GetRecords(Protocol[Page_co]):
    """A client's GetRecords: Kinesis' and DynamoDB Streams' take the same two."""

    def __call__(self, *, ShardIterator: str, Limit: int) -> Page_co: ...


class ShardCursor(Generic[Page]):
    def __init__(
        self,
        start: StartPosition,
        open_at: Callable[[StartPosition], str],
        get_records: GetRecords[Page],
        limit: int,
        renewable: Collection[str],
        max_renewals: int | None = None,
    ) -> None:
        """`open_at` opens an iterator at a position (GetShardIterator), `get_records`
        reads a page of at most `limit` records; an error whose code is `renewable` is
        answered with a fresh iterator, at most `max_renewals` times a read (None: as
        often as it comes)."""
        self.last_sequence = start.sequence_number  # the last record read
        self._start = start
        self._open_at = open_at
        self._get_records = get_records
        self._limit = limit
        self._renewable = frozenset(renewable)
        self._max_renewals = max_renewals
        self._iterator: str | None = None

    def resume_position(self) -> StartPosition:
        """Right after the last record read; the start until one is read."""
        if self.last_sequence is None:
            return self._start
        return StartPosition(
            type=StartPositionType.AFTER_SEQUENCE_NUMBER, sequence_number=self.last_sequence
        )

    def read(self) -> Page:
        """The next page, read with the iterator in hand or with a fresh one. An error
        the service answered drops the iterator (the next read opens a fresh one) and
        reaches the caller unless it is renewable and renewals are left."""
        renewals = 0
        while True:
            try:
                if self._iterator is None:
                    self._iterator = self._open_at(self.resume_position())
                return self._get_records(ShardIterator=self._iterator, Limit=self._limit)
            except ClientError as error:
                self._iterator = None
                if aws_error(error).code not in self._renewable or renewals == self._max_renewals:
                    raise
                renewals += 1

    def advance(self, records: Sequence[Record], next_iterator: str | None) -> bool:
        """Moves past a page read: its records and the iterator it handed on. False when
        it handed none on: the shard is closed and read to its end."""
        if records:
            self.last_sequence = records[-1].sequence_number
        self._iterator = next_iterator
        return next_iterator is not None
