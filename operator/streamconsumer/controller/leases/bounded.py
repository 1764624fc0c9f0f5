"""A bounded consumer's end as the operator keeps it (`spec.end`, docs/replaying.md):
when it takes a SHARD_END of a shard its listing shows open, and when it is Complete."""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import datetime

from streamconsumer.controller.leases.listings import Listings


@dataclass
class Bound:
    end: datetime | None  # None: the consumer never ends
    wall: Callable[[], datetime]  # the operator's clock: the end is a time
    # Complete: once, for good in this process (a shard listed later was born after the end)
    completed: bool = False

    def takes_open_shards_end(self, listings: Listings) -> bool:
        """Is a SHARD_END of a shard listed open taken? Once the end has come: sooner it
        is a reader's bug, judged as for any consumer. Complete then waits for a listing
        started after it, which shows the children of a split just before the end."""
        if self.end is None or self.wall() < self.end:
            return False
        listings.ended_here()
        return True

    def reached(self, listed: Set[str], finished: Set[str], listings: Listings) -> bool:
        """Whether every listed shard is finished, on a listing newer than every end
        taken: it is then Complete (True the once it becomes so)."""
        if self.end is None or self.completed or not listings.listed_since_ends:
            return False
        self.completed = listed <= finished
        return self.completed

    def said(self) -> str:
        """What the Complete condition, Ready and the Event say."""
        at = self.end.isoformat() if self.end is not None else "its end"
        return f"every shard read to {at}: workers scaled to zero"
