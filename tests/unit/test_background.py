"""The test bed's loop in a daemon thread."""

from __future__ import annotations

from testbed.background import BackgroundLoop


class Ticker(BackgroundLoop):
    def __init__(self) -> None:
        self.ticks = 0
        super().__init__(name="ticker")

    def _run(self) -> None:
        while not self._stopping.wait(0.01):
            self.ticks += 1


def test_the_loop_runs_until_stopped_and_stop_waits_for_it() -> None:
    with Ticker() as ticker:
        while ticker.ticks < 3:
            pass
    assert not ticker._thread.is_alive()
    stopped_at = ticker.ticks
    ticker.stop()  # again: nothing to wait for
    assert ticker.ticks == stopped_at
