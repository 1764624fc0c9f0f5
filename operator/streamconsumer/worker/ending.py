"""A bounded consumer's end on one shard (`spec.end`, docs/replaying.md), sans-I/O: its
machine hands it each read, and it says where the shard ends for this consumer.

A shard ends at its first record that arrived after the end: that record and every one
after it are never delivered. A shard with no such record (a quiet one, or one born
after the end) ends once reads begun `END_GRACE_SECONDS` after the end find it at the
tip, as the stream says (`ReadResult.at_tip`), twice in a row: a record put later
arrives after the end. A read that only waited (a subscription with no event) or a
DynamoDB Streams page (empty pages may have records behind them) never says so: such a
shard ends at a record past the end or at its own end. The shard is then checkpointed
at SHARD_END, as at a closed shard's end, so its children are read to the end in turn."""

from __future__ import annotations

from dataclasses import dataclass, replace

from streamconsumer.models.resource import END_GRACE_SECONDS
from streamconsumer.sources.base import ReadResult

QUIET_READS_TO_END = 2


@dataclass
class ConsumerEnd:
    at: float  # seconds since the epoch
    _read_began: float | None = None  # the wall clock when the read in flight began
    _quiet: int = 0  # reads in a row begun after the grace that found the shard caught up

    def reading(self, wall: float | None) -> None:
        """A read begins at `wall` (None: the host has no wall clock, so a quiet shard
        never ends by the clock)."""
        self._read_began = wall

    def cut(self, batch: ReadResult) -> ReadResult:
        """`batch` without the records that arrived after the end, ended at the first of
        them. Pure: the machine may cut outside its lock."""
        for index, record in enumerate(batch.records):
            arrived = record.approximate_arrival_timestamp
            if arrived is not None and arrived.timestamp() > self.at:
                return replace(batch, records=batch.records[:index], shard_end=True)
        return batch

    def caught_up(self, batch: ReadResult) -> bool:
        """Told of each read as it is queued: True once the shard is to end here because
        nothing more can arrive before the end."""
        began = self._read_began
        quiet = (
            not batch.records
            and not batch.shard_end
            and batch.at_tip
            and began is not None
            and began >= self.at + END_GRACE_SECONDS
        )
        self._quiet = self._quiet + 1 if quiet else 0
        return self._quiet >= QUIET_READS_TO_END
