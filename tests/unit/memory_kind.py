"""A stream kind that lives in memory: the recipe for a new kind, as one module. Its
spec model, a lister and a reader (one source class serves both), its worker settings,
what the access policy matches (as if it were an AWS service called "memory"), and its
`KIND`. A real kind is a module of `sources/kinds/`, which `sources/registry.py` finds;
tests register this one with monkeypatch."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.models.source import ENDPOINT_SETTINGS, AwsStreamSource
from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.sources.kind import Access, ReaderSettings, StreamKind


class MemorySpec(AwsStreamSource):
    """`spec.source.memory`: a stream of this process, by name."""

    stream_name: str = Field(min_length=1)


@dataclass
class MemoryShard:
    parents: tuple[str, ...] = ()
    records: list[bytes] = field(default_factory=list)
    closed: bool = False


STREAMS: dict[str, dict[str, MemoryShard]] = {}  # stream name -> shard id -> shard


class MemoryReader:
    def __init__(self, shard_id: str, shard: MemoryShard, start: StartPosition, limit: int):
        self.shard_id = shard_id
        self._shard = shard
        self._limit = limit
        after = start.sequence_number  # set only with AFTER_SEQUENCE_NUMBER
        self._next = int(after) + 1 if after is not None else 0

    def read(self) -> ReadResult:
        data = self._shard.records[self._next : self._next + self._limit]
        records = [
            Record(value, "k", str(self._next + n), checkpoint_sequence=str(self._next + n))
            for n, value in enumerate(data)
        ]
        self._next += len(records)
        ended = self._shard.closed and self._next == len(self._shard.records)
        return ReadResult(records, 0, shard_end=ended)


class MemorySource:
    def __init__(self, spec: MemorySpec, max_records: int = 1000) -> None:
        self.shards = STREAMS[spec.stream_name]
        self.max_records = max_records

    def list_shards(self) -> list[Shard]:
        return [Shard(sid, s.parents, closed=s.closed) for sid, s in self.shards.items()]

    def open_reader(self, shard_id: str, start: StartPosition) -> MemoryReader:
        return MemoryReader(shard_id, self.shards[shard_id], start, self.max_records)

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        return 1 if self.open_reader(shard_id, start).read().records else None

    def incarnation(self) -> None:
        return None


def reader(spec: MemorySpec, settings: ReaderSettings) -> MemorySource:
    return MemorySource(spec, settings.max_records)


KIND = StreamKind(
    name="memory",
    title="Memory",
    spec=MemorySpec,
    lister=lambda spec, identity: MemorySource(spec),  # no AWS: no identity to call as
    reader=reader,
    settings={"memory_stream": "stream_name", **ENDPOINT_SETTINGS},
    access=Access(
        names=lambda spec: (spec.stream_name, None),
        noun="queue",
        services=("memory",),
        actions=("memory:Read",),
    ),
    at_timestamp=False,  # as DynamoDB Streams: the spec's rule refuses that start
)
