"""reading.maxBatchingWindowSeconds, as Lambda's MaximumBatchingWindowInSeconds: a shard's
next call waits up to the window, from the moment its first record was seen, for more
reads to fill it, so a quiet stream costs a call per window instead of one per record.
Sans-I/O: the shard's machine asks it with the time and its queue of reads.

A record therefore waits at most the window before its call begins: every read merged
into the call came after its first record. The call is made at once when it is full,
when the shard has ended, or when nothing more can come (a hand-off, the fence)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from streamconsumer.sources.base import ReadResult


@dataclass
class BatchingWindow:
    seconds: float = 0.0  # 0: every read is a call of its own, at once
    fill_to: int = 1000  # records: the call is made as soon as it holds this many
    _since: float | None = None  # when the head's first record was seen

    def due(self, reads: deque[ReadResult], now: float, more_coming: bool) -> float | None:
        """Merges the reads queued behind the head into it while they fit; returns when
        the head's call is due if it is to wait for more, or None to make it now. The head
        holds records and was never delivered (a retry is never regathered)."""
        if self.seconds <= 0:
            return None
        while len(reads) > 1 and self._fits(reads[0], reads[1]):
            head = reads.popleft()
            reads[0] = replace(reads[0], records=head.records + reads[0].records)
        if self._since is None:
            self._since = now
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
