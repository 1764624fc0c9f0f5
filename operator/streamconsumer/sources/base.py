"""What every stream source provides: its shards with lineage, and a reader per shard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.processor import Record


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[Record]
    millis_behind_latest: int | None
    shard_end: bool = False  # the shard is closed and every record has been read
    child_shards: tuple[str, ...] = ()


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
