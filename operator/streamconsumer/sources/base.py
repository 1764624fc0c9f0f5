"""What every stream source provides: its shards with lineage, and a reader per shard
(what a kind of stream declares is in `sources/kind.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.processor import Record
from streamconsumer.sources.kind import Identity as Identity  # the operator's callers name it here


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[Record]
    millis_behind_latest: int | None
    shard_end: bool = False  # the shard is closed and every record has been read
    child_shards: tuple[str, ...] = ()
    # The stream said this read reached the tip (Kinesis' MillisBehindLatest 0, from
    # GetRecords or a SubscribeToShard event): never a local wait that timed out, and
    # never a DynamoDB Streams page, which may be empty with records behind it.
    at_tip: bool = False


class ShardReader(Protocol):
    shard_id: str

    def read(self) -> ReadResult:
        """The next batch, in order; empty when caught up; after shard end returns
        shard_end again. Raises on errors it could not retry away; calling again resumes
        after the last record returned."""
        ...


@runtime_checkable
class SubscribedReader(ShardReader, Protocol):
    """A reader fed by a push subscription (enhanced fan-out): `read()` itself waits for
    the next event (a bounded time), so its driver does not pause between reads; `close()`
    ends the subscription once the shard is done with."""

    def close(self) -> None: ...


class StreamSource(Protocol):
    def list_shards(self) -> list[Shard]:
        """Every shard still in the stream's retention, open or closed, with parents."""
        ...

    def open_reader(self, shard_id: str, start: StartPosition) -> ShardReader: ...

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        """Milliseconds behind the tip for a reader starting at `start`; None if caught up.
        A closed shard at its end reports its children's backlog (at least 1 ms)."""
        ...

    def incarnation(self) -> str | None:
        """What tells the stream from one deleted and created again under its name (its
        ARN and creation time), for a kind whose shard ids repeat across such streams:
        checkpoints of one are never applied to another (docs/checkpoints.md#the-same-stream).
        None where ids never repeat: checkpoints of another stream name no shard it lists."""
        ...


class ConsumerRegistration(Protocol):
    """A stream consumer registered with the stream (Kinesis enhanced fan-out)."""

    def register(self, name: str) -> str:
        """Registers `name` (idempotent), waits until it is usable; its ARN."""
        ...

    def consumer_arn(self, name: str) -> str | None:
        """The ARN of `name` on this stream; None if it (or the stream) is gone."""
        ...

    def deregister(self, name: str) -> None:
        """Deregisters `name`; done if it is gone already."""
        ...
