"""Which listing of the stream a lease table's shards come from, and the SHARD_ENDs that
wait for a fresher one. A worker usually reads a shard's end before the operator lists
again after a reshard: an open shard in the listing is taken as "not known yet"
(deferred, and a listing asked for) until a listing started after the claim still shows
it open."""

from __future__ import annotations

from streamconsumer.core.lineage import Shard


class Listings:
    def __init__(self) -> None:
        self.started = 0  # listings started so far
        self.current = 0  # the number of the listing the shards come from
        self._claims: dict[str, int] = {}  # a SHARD_END's shard -> listings started by then
        self._ended = -1  # listings started by a bounded consumer's last SHARD_END taken

    def start(self) -> int:
        """A listing of the stream starts: its number, for `set_shards`."""
        self.started += 1
        return self.started

    @property
    def relist_wanted(self) -> bool:
        """A SHARD_END waits for a listing started after it, and none has started yet."""
        claims = self._claims.values()
        return self._ended >= self.started or any(c >= self.started for c in claims)

    def ended_here(self) -> None:
        """A bounded consumer's SHARD_END is taken whatever the listing shows: it is not
        Complete before a listing started after it (`listed_since_ends`), which shows the
        children of a split that came before the end."""
        self._ended = self.started

    @property
    def listed_since_ends(self) -> bool:
        return self.current > self._ended

    def closed(self, shard_id: str, listed: Shard | None) -> bool | None:
        """What the current listing says of the shard a SHARD_END names: closed, still
        open (refused), or None: come back, a listing is asked for (`relist_wanted`)."""
        if listed is not None and listed.closed:
            self._claims.pop(shard_id, None)
            return True
        claimed = self._claims.setdefault(shard_id, self.started)
        if self.current > claimed:
            return False  # listed by a listing started after the claim: still open, refused
        return None
