"""The records workers report they passed over (filtered out, dead-lettered, skipped),
queued until the loop tells them as Events: one note per worker, shard and action."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from streamconsumer.models.api import HeldShard, PassedOver

MAX_PENDING_NOTES = 50
"""Passed-over notes waiting to be told as Events (each its worker, shard and action)."""


@dataclass(frozen=True)
class PassedOverNote:
    worker: str
    shard_id: str
    note: PassedOver


class PassedOverNotes:
    def __init__(self) -> None:
        self.pending: list[PassedOverNote] = []

    def add(self, worker: str, owned: Sequence[HeldShard]) -> None:
        """Queues the notes for Events: one per worker, shard and action, adding up what
        arrives before the loop tells them, and at most MAX_PENDING_NOTES of them (the
        rest are dropped: Events are notices, the worker's metrics and log keep count)."""
        index = {(n.worker, n.shard_id, n.note.action): i for i, n in enumerate(self.pending)}
        for claim in owned:
            for note in claim.passed_over:
                key = (worker, claim.shard_id, note.action)
                if key in index:
                    pending = self.pending[index[key]]
                    self.pending[index[key]] = replace(pending, note=pending.note.merged(note))
                elif len(self.pending) < MAX_PENDING_NOTES:
                    index[key] = len(self.pending)
                    self.pending.append(PassedOverNote(worker, claim.shard_id, note))

    def take(self) -> list[PassedOverNote]:
        """The notes queued since the last call."""
        notes, self.pending = self.pending, []
        return notes
