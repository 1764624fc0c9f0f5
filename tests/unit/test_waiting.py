"""The test bed's one polling loop."""

from __future__ import annotations

import itertools

import pytest

from testbed.waiting import happens_within, wait_for


def test_waits_until_the_condition_holds_and_says_how_long_it_took() -> None:
    calls = itertools.count(1)
    took = wait_for(lambda: next(calls) == 3, 5, "the third call", poll=0.01)
    assert next(calls) == 4, "stops calling once it holds"
    assert 0 < took < 5


def test_running_out_of_time_names_what_was_awaited_and_its_details() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0s waiting for never\nlog tail"):
        wait_for(lambda: False, 0.05, "never", poll=0.01, details=lambda: "log tail")


def test_a_failed_assertion_in_the_condition_ends_the_wait_at_once() -> None:
    calls = itertools.count(1)

    def broken() -> bool:
        next(calls)
        raise AssertionError("pod crashed")

    with pytest.raises(AssertionError, match="pod crashed\nwhile waiting for the pod"):
        wait_for(broken, 60, "the pod")
    assert next(calls) == 2, "called once"


def test_happens_within_says_whether_instead_of_failing() -> None:
    assert happens_within(lambda: True, 1)
    assert not happens_within(lambda: False, 0.05, poll=0.01)
