"""A token bucket: `burst` at once, then `rate` a second. Pure: the caller's clock."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(eq=False)
class TokenBucket:
    rate: float
    burst: float
    _tokens: float = field(default=0.0, init=False)
    _at: float = field(default=-math.inf, init=False)  # never: full at its first use

    def available(self, now: float) -> int:
        """How many may be taken at `now`."""
        self._refill(now)
        return int(self._tokens)

    def take(self, count: int, now: float) -> None:
        """Counts `count` taken (no more than `available` said)."""
        self._refill(now)
        self._tokens = max(0.0, self._tokens - count)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._at)
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
        self._at = max(self._at, now)
