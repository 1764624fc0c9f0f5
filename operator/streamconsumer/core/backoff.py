"""Exponential back-off with full jitter (AWS's recommendation for throttled calls)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float = 0.1
    cap: float = 10.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (0-based): uniform in
        [0, min(cap, base * 2**attempt)], so competing clients spread out."""
        return self.rng.uniform(0.0, min(self.cap, self.base * 2 ** min(attempt, 32)))
