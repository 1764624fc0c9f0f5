"""At most one log line per key per period; the lines held back are counted into the
next one. Sans-I/O: the caller passes the time."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class LogLimit(Generic[K]):
    """Keys (a source address, a reason, ...) are remembered for the `max_keys` most
    recently seen, the least recently seen going first, so memory stays bounded however
    many keys a flood brings. A key forgotten with lines held back loses their count:
    keep an exact count elsewhere (a metric)."""

    def __init__(self, period: float, max_keys: int) -> None:
        if period <= 0 or max_keys < 1:
            raise ValueError("a log limit needs a period > 0 and room for a key")
        self.period = period
        self.max_keys = max_keys
        # key -> (when its last line was written, lines held back since)
        self._keys: OrderedDict[K, tuple[float, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def allow(self, key: K, now: float) -> int | None:
        """None: hold this line back (it is counted). Otherwise write it now, saying that
        this many lines of `key` were held back since its last one."""
        written, held = self._keys.pop(key, (None, 0))
        if written is not None and now - written < self.period:
            self._keys[key] = (written, held + 1)
            return None
        self._keys[key] = (now, 0)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return held
