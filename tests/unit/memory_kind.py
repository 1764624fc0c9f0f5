"""A stream kind that lives in memory: the recipe for a new kind, as one module. Its
spec model, a lister and a reader (one source class serves both), its worker settings,
and its `KIND`; registering it is one line in `sources/registry.py` (tests set it with
monkeypatch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.models.base import Model
from streamconsumer.processor import Record
from streamconsumer.sources.base import ReaderSettings, ReadResult, Settings, StreamKind


class MemorySpec(Model):
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


def settings(spec: MemorySpec) -> Settings:
    return {"stream_name": spec.stream_name}


def spec_from_settings(settings: Mapping[str, Any]) -> MemorySpec:
    return MemorySpec(stream_name=settings["stream_name"])


def reader(spec: MemorySpec, settings: ReaderSettings) -> MemorySource:
    return MemorySource(spec, settings.max_records)


KIND = StreamKind(
    name="memory",
    spec=MemorySpec,
    lister=lambda spec, identity: MemorySource(spec),  # no AWS: no identity to call as
    reader=reader,
    settings=settings,
    spec_from_settings=spec_from_settings,
)
