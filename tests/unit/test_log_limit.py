"""At most one log line per key per period, the held-back lines counted into the next,
in bounded memory."""

from __future__ import annotations

import pytest

from streamconsumer.core.log_limit import LogLimit


def test_a_thousand_lines_of_one_key_give_one_line_then_one_with_the_count() -> None:
    limit: LogLimit[str] = LogLimit(period=60.0, max_keys=10)
    written = [held for i in range(1000) if (held := limit.allow("a", i * 0.01)) is not None]
    assert written == [0], "the first line only"
    assert limit.allow("a", 59.9) is None, "still within the period of the first line"
    assert limit.allow("a", 60.0) == 1000, "the next line counts every one held back"
    assert limit.allow("a", 60.1) is None
    assert limit.allow("a", 200.0) == 1, "the count starts again after each line"
    assert limit.allow("a", 300.0) == 0


def test_keys_are_limited_apart() -> None:
    limit: LogLimit[tuple[str, str]] = LogLimit(period=60.0, max_keys=10)
    assert limit.allow(("10.0.0.1", "no_token"), 0.0) == 0
    assert limit.allow(("10.0.0.1", "token_refused"), 1.0) == 0, "another reason"
    assert limit.allow(("10.0.0.2", "no_token"), 2.0) == 0, "another source"
    assert limit.allow(("10.0.0.1", "no_token"), 3.0) is None


def test_memory_is_bounded_and_the_least_recently_seen_key_goes_first() -> None:
    limit: LogLimit[int] = LogLimit(period=60.0, max_keys=100)
    assert limit.allow(-1, 0.0) == 0
    for source in range(100_000):
        assert limit.allow(source, 1.0) == 0, "a new key: its first line"
        assert limit.allow(-1, 1.0) is None, "seen all along, so never forgotten"
        assert len(limit) <= 100
    assert len(limit) == 100
    assert limit.allow(0, 2.0) == 0, "forgotten long ago: a first line again"
    assert limit.allow(99_999, 2.0) is None, "recent: still held back"
    assert limit.allow(-1, 61.0) == 100_000


@pytest.mark.parametrize(("period", "max_keys"), [(0.0, 10), (-1.0, 10), (60.0, 0)])
def test_a_limit_that_cannot_work_is_refused(period: float, max_keys: int) -> None:
    with pytest.raises(ValueError, match="period"):
        LogLimit(period, max_keys)
