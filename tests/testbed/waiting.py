"""Waiting for a condition, for tests, benchmarks and the demo: the one polling loop."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    poll: float = 0.2,
    details: Callable[[], str] = str,
) -> float:
    """Waits until `condition()`; returns the seconds it took. Fails when time runs out,
    or at once when the condition raises AssertionError (it has seen what cannot come
    right by waiting); either failure names `what` and adds `details()`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if condition():
                return time.monotonic() - started
        except AssertionError as error:
            raise AssertionError(f"{error}\nwhile waiting for {what}\n{details()}") from None
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{details()}")


def happens_within(condition: Callable[[], bool], timeout: float, poll: float = 0.1) -> bool:
    """Like wait_for, but says whether `condition()` came true instead of failing."""
    try:
        wait_for(condition, timeout, "", poll=poll)
    except AssertionError:
        return False
    return True
