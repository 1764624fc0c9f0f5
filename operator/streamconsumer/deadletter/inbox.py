"""Dead letters read back from their target, for `streamconsumer deadletters`: one inbox
per target kind behind one small interface (`Inbox`), each letter with what removes it
once it has been redriven, so that a second redrive finds nothing to do.

- SQS: letters are received hidden (SQS shows the next messages only while the first are
  hidden) and deleted once redriven; the rest, and other consumers' messages, are shown
  again at once.
- S3: each object is a batch of letters; redriven, an object is deleted, or written again
  with the letters that are left.
- Kinesis: a stream's records cannot be deleted; the redriven letters' places are kept in
  a ledger file beside the command (`--ledger`), read again by the next run.

Everything read is bounded: at most `max_letters` letters of the consumer, an S3 object
of at most OBJECT_READ_BYTES."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import boto3

from streamconsumer.models.failure import (
    DeadLetterTarget,
    KinesisDeadLetters,
    S3DeadLetters,
    SqsDeadLetters,
)
from streamconsumer.processor import Record
from streamconsumer.sources.aws import client_options
from streamconsumer.sources.kinesis_polling import KinesisSource, StreamRef

OBJECT_READ_BYTES = 256 * 1024 * 1024  # an S3 letter object read back at most
SQS_RECEIVE = 10  # messages per ReceiveMessage, SQS's most
SQS_HIDDEN_SECONDS = 300  # a redrive holds the letters it received this long
EMPTY_RECEIVES = 3  # SQS samples its servers: empty answers in a row before it is empty
SEQUENCE = re.compile(r"[0-9]{1,128}")  # a Kinesis or DynamoDB Streams sequence number
LEDGER_BYTES = 64 * 1024 * 1024  # a Kinesis target's ledger read back at most
SCANNED_PER_LETTER = 10  # messages or records looked at, other consumers' too, per --max


class InboxError(Exception):
    """A target that cannot be read back as dead letters, said in one line."""


@dataclass(frozen=True)
class Held:
    """One letter read back: its document (base.encode's shape) and where it is held."""

    document: dict[str, Any]
    place: Any  # the inbox's own: a receipt handle, an object key, a stream position

    @property
    def shard_id(self) -> str:
        return str(self.document["shardId"])

    @property
    def position(self) -> tuple[int, int]:
        """Where the record was in its shard: sequence, then sub-sequence."""
        return int(self.document["sequenceNumber"]), int(
            self.document.get("subSequenceNumber") or 0
        )

    def record(self) -> Record:
        """The record as the processor first saw it: data, key, shard place, arrival."""
        arrival = self.document.get("approximateArrivalTimestamp")
        return Record(
            data=base64.b64decode(self.document["data"]),
            partition_key=str(self.document["partitionKey"]),
            sequence_number=str(self.document["sequenceNumber"]),
            approximate_arrival_timestamp=datetime.fromisoformat(arrival) if arrival else None,
            sub_sequence_number=self.document.get("subSequenceNumber"),
        )


class Inbox(Protocol):
    name: str  # for messages: "the SQS queue https://…"
    truncated: bool  # the last `letters` stopped at its scan limit, not at the end
    skipped: list[str]  # what the last `letters` could not read (S3 objects too large)

    def letters(self, consumer: str, max_letters: int, hold: bool) -> list[Held]:
        """The consumer's letters (`namespace/name`), at most `max_letters`; `hold`: kept
        from other readers while they are redriven (SQS), else only looked at."""
        ...

    def remove(self, redriven: list[Held]) -> None:
        """Letters redriven: a later `letters` does not return them."""
        ...

    def release(self, letters: list[Held]) -> None:
        """Letters held and not redriven: the next reader sees them at once."""
        ...


def inbox_for(target: DeadLetterTarget, ledger: Path) -> Inbox:
    if target.sqs is not None:
        return SqsInbox(target.sqs)
    if target.s3 is not None:
        return S3Inbox(target.s3)
    assert target.kinesis is not None, "the CRD requires exactly one target"
    return KinesisInbox(target.kinesis, ledger)


def parsed(body: bytes | str, consumer: str) -> dict[str, Any] | None:
    """A letter of this consumer, every field of the shape `base.encode` writes, or None:
    another consumer's, or not a letter at all."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(document, dict) or document.get("consumer") != consumer:
        return None
    sequence, sub = document.get("sequenceNumber"), document.get("subSequenceNumber")
    arrival = document.get("approximateArrivalTimestamp")
    texts = [document.get(name) for name in ("shardId", "partitionKey", "data")]
    if not all(isinstance(text, str) and text for text in texts[:2]):
        return None
    if not (isinstance(sequence, str) and SEQUENCE.fullmatch(sequence)):
        return None
    if sub is not None and not (type(sub) is int and sub >= 0):
        return None
    try:
        base64.b64decode(str(texts[2]), validate=True)
        if arrival is not None:
            datetime.fromisoformat(arrival)
    except (TypeError, ValueError):
        return None
    return document


class SqsInbox:
    def __init__(self, target: SqsDeadLetters) -> None:
        self._client = boto3.client("sqs", **client_options(target.region, target.endpoint_url))
        self._queue_url = target.queue_url
        self.name = f"the SQS queue {target.queue_url}"
        self.truncated = False
        self.skipped: list[str] = []

    def letters(self, consumer: str, max_letters: int, hold: bool) -> list[Held]:
        """Received hidden (SQS shows a message again only once hidden ones are done), then
        shown again at once: other consumers' letters and anything not a letter always,
        this consumer's unless `hold`."""
        self._refuse_a_receive_count()
        found: dict[str, Held] = {}
        others: dict[str, str] = {}  # message id: receipt handle
        try:
            self._receive(consumer, max_letters, found, others)
        except BaseException:  # (^C too) nothing is left hidden
            self._show(list(others.values()) + [held.place for held in found.values()])
            raise
        shown = list(others.values())
        if not hold:
            shown += [held.place for held in found.values()]
        self._show(shown)
        return list(found.values())

    def _refuse_a_receive_count(self) -> None:
        """Every receive counts towards a RedrivePolicy's maxReceiveCount, other
        consumers' messages too: reading would move letters to the queue's own DLQ."""
        attributes = self._client.get_queue_attributes(
            QueueUrl=self._queue_url, AttributeNames=["RedrivePolicy"]
        ).get("Attributes", {})
        if "RedrivePolicy" in attributes:
            raise InboxError(
                f"{self.name} has a RedrivePolicy: each read counts towards its "
                "maxReceiveCount, and would move letters (other consumers' too) to its own "
                "dead-letter queue; remove the policy to read it back"
            )

    def _receive(
        self, consumer: str, max_letters: int, found: dict[str, Held], others: dict[str, str]
    ) -> None:
        empty = 0
        self.truncated = False
        while len(found) < max_letters and empty < EMPTY_RECEIVES:
            if len(found) + len(others) >= SCANNED_PER_LETTER * max_letters:
                self.truncated = True
                break
            messages = self._client.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=SQS_RECEIVE,
                VisibilityTimeout=SQS_HIDDEN_SECONDS,
                WaitTimeSeconds=1,
            ).get("Messages", [])
            empty = 0 if messages else empty + 1
            for message in messages:
                document = parsed(message["Body"], consumer)
                if document is not None and len(found) < max_letters:
                    found[message["MessageId"]] = Held(document, message["ReceiptHandle"])
                else:
                    others[message["MessageId"]] = message["ReceiptHandle"]

    def release(self, letters: list[Held]) -> None:
        self._show([held.place for held in letters])

    def _show(self, handles: list[str]) -> None:
        for start in range(0, len(handles), SQS_RECEIVE):
            entries = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for i, handle in enumerate(handles[start : start + SQS_RECEIVE])
            ]
            self._client.change_message_visibility_batch(QueueUrl=self._queue_url, Entries=entries)

    def remove(self, redriven: list[Held]) -> None:
        for start in range(0, len(redriven), SQS_RECEIVE):
            entries = [
                {"Id": str(i), "ReceiptHandle": held.place}
                for i, held in enumerate(redriven[start : start + SQS_RECEIVE])
            ]
            answer = self._client.delete_message_batch(QueueUrl=self._queue_url, Entries=entries)
            if answer.get("Failed"):
                codes = sorted({f["Code"] for f in answer["Failed"]})
                raise InboxError(f"{len(answer['Failed'])} redriven letters not deleted: {codes}")


class S3Inbox:
    def __init__(self, target: S3DeadLetters) -> None:
        self._client = boto3.client("s3", **client_options(target.region, target.endpoint_url))
        self._bucket = target.bucket
        self._prefix = target.prefix
        self._objects: dict[str, list[bytes]] = {}  # key: its lines, as read
        self._gone: dict[str, set[int]] = {}  # key: its lines redriven so far
        self.name = f"s3://{target.bucket}/{target.prefix}"
        self.truncated = False
        self.skipped: list[str] = []  # objects over OBJECT_READ_BYTES, not read

    def letters(self, consumer: str, max_letters: int, hold: bool) -> list[Held]:
        found: list[Held] = []
        self.truncated = False
        self.skipped = []
        for key in self._keys(f"{self._prefix}{consumer}/"):
            lines = self._read(key)
            if lines is None:
                self.skipped.append(key)
                continue
            self._objects[key], self._gone[key] = lines, set()
            for index, line in enumerate(lines):
                document = parsed(line, consumer)
                if document is not None:
                    found.append(Held(document, (key, index)))
                if len(found) >= max_letters:
                    return found
        return found

    def remove(self, redriven: list[Held]) -> None:
        touched = set()
        for held in redriven:
            key, index = held.place
            self._gone.setdefault(key, set()).add(index)
            touched.add(key)
        for key in touched:
            gone = self._gone[key]
            left = [line for i, line in enumerate(self._objects[key]) if i not in gone]
            if left:
                body = b"".join(line + b"\n" for line in left)
                self._client.put_object(Bucket=self._bucket, Key=key, Body=body)
            else:
                self._client.delete_object(Bucket=self._bucket, Key=key)

    def release(self, letters: list[Held]) -> None:
        pass  # nothing is held

    def _keys(self, prefix: str) -> Iterator[str]:
        for page in self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=prefix
        ):
            for item in page.get("Contents", []):
                yield item["Key"]

    def _read(self, key: str) -> list[bytes] | None:
        """The object's lines; None for one over OBJECT_READ_BYTES (left where it is)."""
        answer = self._client.get_object(Bucket=self._bucket, Key=key)
        if answer["ContentLength"] > OBJECT_READ_BYTES:
            answer["Body"].close()
            return None
        body: bytes = answer["Body"].read()
        return [line for line in body.split(b"\n") if line]


class KinesisInbox:
    def __init__(self, target: KinesisDeadLetters, ledger: Path) -> None:
        self._client = boto3.client("kinesis", **client_options(target.region, target.endpoint_url))
        stream = StreamRef(
            name=None if target.stream_arn else target.stream_name, arn=target.stream_arn
        )
        self._source = KinesisSource(self._client, stream)  # its listing pages through shards
        self._stream: dict[str, Any] = stream.params()
        if ledger.is_dir() or not os.access(ledger.parent.resolve(), os.W_OK):
            raise InboxError(f"{ledger}: cannot write the redrive ledger there")
        self._ledger = ledger
        self.name = f"the Kinesis stream {target.stream_arn or target.stream_name}"
        self.truncated = False
        self.skipped: list[str] = []

    def letters(self, consumer: str, max_letters: int, hold: bool) -> list[Held]:
        done = self._redriven()
        found: list[Held] = []
        scanned = 0
        self.truncated = False
        for shard in self._source.list_shards():
            for sequence, data in self._records(shard.id):
                place = f"{shard.id}/{sequence}"
                if place in done:  # (the ledger's own bound bounds these)
                    continue
                scanned += 1
                if scanned > SCANNED_PER_LETTER * max_letters:
                    self.truncated = True
                    return found
                document = parsed(data, consumer)
                if document is not None:
                    found.append(Held(document, place))
                if len(found) >= max_letters:
                    return found
        return found

    def remove(self, redriven: list[Held]) -> None:
        done = self._redriven() | {held.place for held in redriven}
        scratch = self._ledger.with_name(self._ledger.name + ".writing")
        scratch.write_text(json.dumps(sorted(done), indent=0) + "\n")
        os.replace(scratch, self._ledger)  # whole or not at all, even under ^C

    def release(self, letters: list[Held]) -> None:
        pass  # nothing is held

    def _redriven(self) -> set[str]:
        if not self._ledger.exists():
            return set()
        try:
            if self._ledger.stat().st_size > LEDGER_BYTES:
                raise ValueError
            places = json.loads(self._ledger.read_text())
            if not (isinstance(places, list) and all(isinstance(p, str) for p in places)):
                raise ValueError
            return set(places)
        except (ValueError, OSError):
            raise InboxError(f"{self._ledger} is not a redrive ledger") from None

    def _records(self, shard_id: str) -> Iterator[tuple[str, bytes]]:
        """The shard's records from its oldest, to where it was when read."""
        iterator = self._client.get_shard_iterator(
            ShardId=shard_id, ShardIteratorType="TRIM_HORIZON", **self._stream
        )["ShardIterator"]
        while iterator:
            answer = self._client.get_records(ShardIterator=iterator, Limit=10000)
            for record in answer["Records"]:
                yield record["SequenceNumber"], record["Data"]
            if not answer["Records"] and not answer.get("MillisBehindLatest"):
                return
            iterator = answer.get("NextShardIterator")
