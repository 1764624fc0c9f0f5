"""reading.maxBatchingWindowSeconds, as Lambda's MaximumBatchingWindowInSeconds: a shard's
next call waits up to the window, from the moment its first record was seen, for more
reads to fill it, so a quiet stream costs a call per window instead of one per record.
Sans-I/O: the shard's machine asks it with the time and its queue of reads.

A record therefore waits at most the window after its read before its call begins (or,
if longer, until the call before it and its checkpoint are done): every read merged into
the call came after its first record. The call is made at once when it is full,
when the shard has ended, or when nothing more can come (a hand-off, the fence)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from streamconsumer.processor import Record
from streamconsumer.sources.base import ReadResult


@dataclass
class BatchingWindow:
    seconds: float = 0.0  # 0: every read is a call of its own, at once
    fill_to: int = 1000  # records: the call is made as soon as it holds this many
    _since: float | None = None  # when the head's first record was read (or first seen)
    # Each read's last record and when it arrived: a head read while a call ran, a
    # retry waited or the fence was shut counts its window from its read, not from then.
    _reads: deque[tuple[tuple[int, int], float]] = field(default_factory=deque)

    def arrived(self, last: Record | None, now: float) -> None:
        """A read whose last record is `last` (None: it held none) was queued at `now`."""
        if self.seconds > 0 and last is not None:
            self._reads.append((last.position, now))

    def due(self, reads: deque[ReadResult], now: float, more_coming: bool) -> float | None:
        """Merges the reads queued behind the head into it while they fit; returns when
        the head's call is due if it is to wait for more, or None to make it now. The head
        holds records and was never delivered (a retry is never regathered)."""
        if self.seconds <= 0:
            return None
        while len(reads) > 1 and self._fits(reads[0], reads[1]):
            head = reads.popleft()
            reads[0] = replace(reads[0], records=head.records + reads[0].records)
        first = reads[0].records[0].position
        while self._reads and self._reads[0][0] < first:
            self._reads.popleft()
        if self._since is None:
            self._since = self._reads[0][1] if self._reads else now
        due = self._since + self.seconds
        head = reads[0]
        full = len(head.records) >= self.fill_to or len(reads) > 1
        if full or head.shard_end or not more_coming or now >= due:
            return None
        return due

    def delivered(self) -> None:
        """The head left the queue: the next one's window starts when it is seen."""
        self._since = None

    def _fits(self, head: ReadResult, behind: ReadResult) -> bool:
        # A FilteredOut (a subclass) is passed over on its own, after what precedes it.
        plain = type(head) is ReadResult and type(behind) is ReadResult
        return plain and len(head.records) + len(behind.records) <= self.fill_to
