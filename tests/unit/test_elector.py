"""The production host of the election (`leadership.Elector`) on its own thread and loop:
an operator whose event loop is busy for longer than the renew deadline (hundreds of
consumers) keeps its term, and still hears of a change once its loop runs again."""

from __future__ import annotations

import asyncio
import threading
import time

from streamconsumer.controller.election.leadership import Elector, LockConflict
from streamconsumer.core.election import Act, Action, Election, ElectionTiming, LeaseRecord

TIMING = ElectionTiming(lease_seconds=1.5, renew_deadline_seconds=1.0, retry_seconds=0.2)


class MemoryLock:
    """A Lease in memory, compare-and-swap on its version, as the apiserver keeps one."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.renewals = 0
        self._mutex = threading.Lock()

    def get(self) -> LeaseRecord | None:
        with self._mutex:
            return self.record

    def swap(self, action: Action, holder: str | None, lease_seconds: float) -> LeaseRecord:
        with self._mutex:
            current = self.record.version if self.record is not None else ""
            if current != action.expected_version:
                raise LockConflict("moved")
            version = str(int(current or 0) + 1)
            self.record = LeaseRecord(holder, lease_seconds, action.transitions, version)
            self.renewals += action.act is Act.RENEW
            return self.record

    def taken_by(self, holder: str) -> None:
        """Another replica takes the Lease."""
        with self._mutex:
            transitions = self.record.transitions + 1 if self.record is not None else 0
            self.record = LeaseRecord(holder, 15, transitions, "99")


def test_a_busy_operator_loop_does_not_cost_the_term() -> None:
    lock = MemoryLock()

    async def scenario() -> tuple[bool, bool, int]:
        elector = Elector(lock, Election("a", TIMING, time.monotonic()), time.monotonic)
        elector.start()
        try:
            await asyncio.wait_for(elector.until_leading(), 5)
            renewals = lock.renewals
            # The operator's loop, blocked (what the test is about).
            time.sleep(3 * TIMING.renew_deadline_seconds)  # noqa: ASYNC251
            busy_renewals = lock.renewals - renewals
            leading, lost = elector.leading(), elector.lost()
            return leading, lost, busy_renewals
        finally:
            await elector.resign()
            await elector.stop()

    leading, lost, renewals = asyncio.run(scenario())
    assert renewals >= 3, "renewed on its own thread while the operator's loop was blocked"
    assert leading
    assert not lost
    assert lock.record is not None
    assert lock.record.holder is None, "resigned: the Lease freed"


def test_the_operator_loop_hears_that_the_term_is_over() -> None:
    lock = MemoryLock()

    async def scenario() -> bool:
        elector = Elector(lock, Election("a", TIMING, time.monotonic()), time.monotonic)
        elector.start()
        try:
            await asyncio.wait_for(elector.until_leading(), 5)
            lock.taken_by("b")
            while not elector.lost():
                await asyncio.wait_for(elector.next_change(), 5)
            return elector.leading()
        finally:
            await elector.stop()

    assert asyncio.run(scenario()) is False
