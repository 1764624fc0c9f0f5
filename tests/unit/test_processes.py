"""The test bed's process helpers that need no process."""

from __future__ import annotations

import pytest

from testbed.processes import stopped_on_failure


def test_stopped_on_failure_stops_only_when_the_block_fails() -> None:
    stopped: list[str] = []
    with stopped_on_failure(lambda: stopped.append("ok")):
        pass
    assert stopped == []
    with pytest.raises(KeyboardInterrupt), stopped_on_failure(lambda: stopped.append("failed")):
        raise KeyboardInterrupt  # any failure, not only an Exception
    assert stopped == ["failed"]
