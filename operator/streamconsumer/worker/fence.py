"""Self-fencing (DESIGN §3.2): a worker may deliver records only until `lease duration`
after it *sent* its last successful heartbeat, measured on its own monotonic clock. The
operator waits longer than that (plus a grace) before it gives the shards to anyone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Fence:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._deadline = -float("inf")
        self._lock = threading.Lock()

    def renew(self, sent_at: float, lease_duration: float) -> None:
        with self._lock:
            self._deadline = max(self._deadline, sent_at + lease_duration)

    def open(self) -> bool:
        """True while this worker may still deliver records."""
        return self._clock() < self._deadline

    def remaining(self) -> float:
        return self._deadline - self._clock()
