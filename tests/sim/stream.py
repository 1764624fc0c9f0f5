"""A simulated Kinesis-like stream: shards over a hash space, puts, splits and merges
(any number of generations), a stream replaced by a new one (DynamoDB: the table's
stream disabled and enabled again), retention that trims closed shards, and the
StreamSource the operator and the workers read it through."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from sim.world import World, simulated, wall
from streamconsumer.core.lineage import Shard
from streamconsumer.models import StartPosition, StartPositionType
from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult

KEYS = 5  # records' partition keys are k0..k4, by sequence (the filter drops k0)

HASH_SPACE = 1 << 16


class ShardGone(Exception):
    """The shard left the stream (retention): like Kinesis' ResourceNotFoundException."""


@dataclass
class SimShard:
    id: str
    parents: tuple[str, ...]
    low: int
    high: int  # inclusive
    sequences: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    closed_at: float | None = None
    waits_for: tuple[str, ...] = ()


class SimStream:
    def __init__(self, world: World, shards: int) -> None:
        self.world = world
        self.shards: dict[str, SimShard] = {}
        self.trimmed: dict[str, SimShard] = {}
        self._ids = itertools.count()
        self._sequence = itertools.count(1)
        self.values: dict[int, str] = {}  # sequence -> the value put
        self.arrived: dict[int, float] = {}  # sequence -> when it arrived
        width = HASH_SPACE // shards
        for i in range(shards):
            high = HASH_SPACE - 1 if i == shards - 1 else (i + 1) * width - 1
            self._add((), i * width, high)

    def _add(
        self, parents: tuple[str, ...], low: int, high: int, waits_for: tuple[str, ...] = ()
    ) -> SimShard:
        shard = SimShard(f"shardId-{next(self._ids):012d}", parents, low, high)
        shard.waits_for = waits_for
        self.shards[shard.id] = shard
        return shard

    def open_shards(self) -> list[SimShard]:
        return sorted((s for s in self.shards.values() if s.closed_at is None), key=lambda s: s.low)

    # --- changes ----------------------------------------------------------------------

    def put(self, count: int, arrival: float | None = None) -> None:
        """`count` records at random keys, arriving now (or at `arrival`: the history a
        stream has before the consumer starts)."""
        open_shards = self.open_shards()
        lows = [s.low for s in open_shards]
        for _ in range(count):
            key = self.world.rng.randrange(HASH_SPACE)
            shard = open_shards[bisect.bisect_right(lows, key) - 1]
            sequence = next(self._sequence)
            shard.sequences.append(sequence)
            shard.arrivals.append(self.world.now if arrival is None else arrival)
            self.arrived[sequence] = shard.arrivals[-1]
            self.values[sequence] = f"v{sequence}"

    def put_large(self, shard: SimShard, size: int) -> int:
        """One record of `size` bytes into `shard`, arriving now; its sequence."""
        sequence = next(self._sequence)
        shard.sequences.append(sequence)
        shard.arrivals.append(self.world.now)
        self.arrived[sequence] = self.world.now
        self.values[sequence] = "x" * size
        return sequence

    def split(self, pick: int) -> bool:
        candidates = [s for s in self.open_shards() if s.high - s.low >= 2]
        if not candidates:
            return False
        parent = candidates[pick % len(candidates)]
        parent.closed_at = self.world.now
        middle = (parent.low + parent.high) // 2
        self._add((parent.id,), parent.low, middle)
        self._add((parent.id,), middle + 1, parent.high)
        return True

    def merge(self, pick: int) -> bool:
        open_shards = self.open_shards()
        if len(open_shards) < 2:
            return False
        index = pick % (len(open_shards) - 1)
        first, adjacent = open_shards[index], open_shards[index + 1]
        for parent in (first, adjacent):
            parent.closed_at = self.world.now
        self._add((first.id, adjacent.id), first.low, adjacent.high)
        return True

    def replace_stream(self, pick: int) -> bool:
        """A new stream in place of the old one, as DynamoDB makes when a table's stream
        is disabled and enabled again: every open shard closes, and the new stream's
        shards (1 or 2, no parents: no lineage crosses streams) wait for them."""
        last = tuple(s.id for s in self.open_shards())
        for shard_id in last:
            self.shards[shard_id].closed_at = self.world.now
        if pick % 2:
            middle = HASH_SPACE // 2
            self._add((), 0, middle - 1, last)
            self._add((), middle, HASH_SPACE - 1, last)
        else:
            self._add((), 0, HASH_SPACE - 1, last)
        return True

    def expire(self, retention: float) -> list[str]:
        """Trims closed shards that ended more than `retention` ago."""
        gone = [
            s.id
            for s in self.shards.values()
            if s.closed_at is not None and self.world.now - s.closed_at > retention
        ]
        for shard_id in gone:
            self.trimmed[shard_id] = self.shards.pop(shard_id)
        return gone

    # --- reading ----------------------------------------------------------------------

    def listing(self) -> list[Shard]:
        return [
            Shard(s.id, s.parents, closed=s.closed_at is not None, waits_for=s.waits_for)
            for s in sorted(self.shards.values(), key=lambda s: int(s.id[8:]))
        ]

    def children(self, shard_id: str) -> tuple[str, ...]:
        return tuple(s.id for s in self.shards.values() if shard_id in s.parents)

    def shard(self, shard_id: str) -> SimShard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise ShardGone(shard_id)
        return shard

    def record(self, sequence: int) -> Record:
        value = self.values[sequence]
        return Record(
            value.encode(),
            f"k{sequence % KEYS}",
            str(sequence),
            approximate_arrival_timestamp=wall(self.arrived[sequence]),
            checkpoint_sequence=str(sequence),
        )


class SimReader:
    """Like Kinesis' reader: positioned on the first read (a trimmed shard fails then)."""

    def __init__(self, stream: SimStream, shard_id: str, start: StartPosition, limit: int):
        self.shard_id = shard_id
        self._stream = stream
        self._limit = limit
        self._start = start
        self._index: int | None = None

    def _position(self, shard: SimShard) -> int:
        start = self._start
        if start.type is StartPositionType.AFTER_SEQUENCE_NUMBER:
            assert start.sequence_number is not None
            return bisect.bisect_right(shard.sequences, int(start.sequence_number))
        if start.type is StartPositionType.LATEST:
            return len(shard.sequences)
        if start.type is StartPositionType.AT_TIMESTAMP:
            assert start.timestamp is not None
            return bisect.bisect_left(shard.arrivals, simulated(start.timestamp))
        return 0

    def read(self) -> ReadResult:
        shard = self._stream.shard(self.shard_id)
        if self._index is None:
            self._index = self._position(shard)
        sequences = shard.sequences[self._index : self._index + self._limit]
        self._index += len(sequences)
        records = [self._stream.record(s) for s in sequences]
        remaining = len(shard.sequences) - self._index
        behind = 0
        if remaining:
            behind = int((self._stream.world.now - shard.arrivals[self._index]) * 1000)
        if shard.closed_at is not None and not remaining:
            return ReadResult(records, 0, True, self._stream.children(self.shard_id))
        return ReadResult(records, behind, at_tip=not remaining)


class SimSource:
    def __init__(self, stream: SimStream, limit: int = 25) -> None:
        self.stream = stream
        self.limit = limit

    def list_shards(self) -> list[Shard]:
        return self.stream.listing()

    def open_reader(self, shard_id: str, start: StartPosition) -> SimReader:
        return SimReader(self.stream, shard_id, start, self.limit)

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        """As KinesisSource.backlog: a closed shard at its end reports its children's."""
        result = SimReader(self.stream, shard_id, start, 1).read()
        if result.records:
            return max(1, result.millis_behind_latest or 0)
        if not result.shard_end:
            return None
        trim_horizon = StartPosition(type=StartPositionType.TRIM_HORIZON)
        children = (self.backlog(child, trim_horizon) or 0 for child in result.child_shards)
        return max([1, *children])
