"""What a dead-letter target is given, the one JSON shape every target writes (the
record, data in base64, with where it came from and why it failed), and the size check
every letter passes before it is sent.

A letter that can never fit its target must not be retried as if the target were down:
it would be retried for ever, the shard stalled and reported as merely failing. Each
target declares its limit once; a letter is encoded once, and the bytes measured are
the bytes sent. What does not fit goes to the overflow target (`overflowS3`) if there is
one; otherwise the write raises `LetterTooLarge` and the shard blocks, as under `block`."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from streamconsumer.processor import Record

T = TypeVar("T")


@dataclass(frozen=True)
class FailedBatch:
    consumer: str  # namespace/name
    shard_id: str
    records: list[Record]
    error: str
    attempts: int


@dataclass(frozen=True)
class Letter:
    """One failed record's envelope, encoded once: `body` is what is measured and sent."""

    record: Record
    document: dict[str, Any]
    body: bytes


class LetterTooLarge(Exception):
    """A letter over its target's limit, with no overflow target: no retry can write it."""

    def __init__(self, letter: Letter, size: int, target: str, limit: int) -> None:
        self.sequence_number = letter.record.sequence_number  # the record it names
        super().__init__(
            f"record {letter.record.sequence_number} is {size} bytes as a dead letter, over "
            f"the {target} limit of {limit} bytes: it can never be written there "
            "(deadLetter.overflowS3 takes such letters)"
        )


class DeadLetterWriter(Protocol):
    def write(self, batch: FailedBatch) -> None:
        """Stores every record of the batch, or raises: `LetterTooLarge` if one can never
        be stored (the shard blocks), anything else if the target failed (retried)."""
        ...


class Target(Protocol):
    """One kind of target: its limit, how it counts a letter, and how it sends them."""

    name: str  # what a letter becomes there, for messages: "SQS message"

    def limit(self) -> int:
        """The most bytes one letter may count."""
        ...

    def size(self, letter: Letter) -> int:
        """What the letter counts against `limit`, as the service counts it."""
        ...

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        """Sends letters that fit, in requests within the service's own limits."""
        ...


class DeadLetters:
    """A target, with an overflow for what does not fit it."""

    def __init__(self, target: Target, overflow: DeadLetters | None = None) -> None:
        self.target = target
        self.overflow = overflow

    def write(self, batch: FailedBatch) -> None:
        self.send(batch, encode(batch))

    def send(self, batch: FailedBatch, letters: list[Letter]) -> None:
        self.check(letters)  # nothing is sent before every letter has a place
        fitting, too_large = self._sorted(letters)
        if too_large and self.overflow is not None:
            self.overflow.send(batch, too_large)
        if fitting:
            self.target.send(batch, fitting)

    def check(self, letters: list[Letter]) -> None:
        """Raises LetterTooLarge if a letter fits neither here nor in the overflow."""
        _, too_large = self._sorted(letters)
        if too_large and self.overflow is not None:
            self.overflow.check(too_large)
        elif too_large:
            first, target = too_large[0], self.target
            raise LetterTooLarge(first, target.size(first), target.name, target.limit())

    def _sorted(self, letters: list[Letter]) -> tuple[list[Letter], list[Letter]]:
        """(the letters that fit the target, those that do not)."""
        limit = self.target.limit()
        fitting: list[Letter] = []
        too_large: list[Letter] = []
        for letter in letters:
            (fitting if self.target.size(letter) <= limit else too_large).append(letter)
        return fitting, too_large


def encode(batch: FailedBatch) -> list[Letter]:
    """The batch's letters, with one `deadLetteredAt`: its length varies (isoformat drops
    zero microseconds), so each letter is encoded once and sent as measured."""
    now = datetime.now(UTC).isoformat()
    letters = []
    for record in batch.records:
        document = _document(batch, record, now)
        body = json.dumps(document, separators=(",", ":")).encode()
        letters.append(Letter(record, document, body))
    return letters


def _document(batch: FailedBatch, record: Record, dead_lettered_at: str) -> dict[str, Any]:
    arrival = record.approximate_arrival_timestamp
    return {
        "consumer": batch.consumer,
        "shardId": batch.shard_id,
        "sequenceNumber": record.sequence_number,
        "subSequenceNumber": record.sub_sequence_number,
        "partitionKey": record.partition_key,
        "approximateArrivalTimestamp": arrival.isoformat() if arrival else None,
        "data": base64.b64encode(record.data).decode(),
        "error": batch.error,
        "attempts": batch.attempts,
        "deadLetteredAt": dead_lettered_at,
    }


def chunks(
    items: Iterable[T], size: Callable[[T], int], max_count: int, max_bytes: int
) -> Iterator[list[T]]:
    """Consecutive requests of at most `max_count` items and `max_bytes` in all; an item
    is never larger than `max_bytes` (it was checked against a smaller limit)."""
    chunk: list[T] = []
    total = 0
    for item in items:
        item_size = size(item)
        if chunk and (len(chunk) == max_count or total + item_size > max_bytes):
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += item_size
    if chunk:
        yield chunk
