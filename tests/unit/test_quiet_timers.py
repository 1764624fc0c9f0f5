"""kopf's line for every timer run that succeeded is dropped from the operator's log;
its other lines, and any timer's failure, stay."""

from __future__ import annotations

import logging

import pytest

from streamconsumer.controller.__main__ import QuietTimers


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    ("message", "level", "kept"),
    [
        ("Timer 'check_workers' succeeded.", logging.INFO, False),
        ("Timer 'catch_up' succeeded.", logging.INFO, False),
        ("Timer 'check_workers' failed with an exception. Will retry.", logging.ERROR, True),
        ("Handler 'reconcile_children' succeeded.", logging.INFO, True),
        ("workers: 1 replicas of example/clicks:1", logging.INFO, True),
    ],
)
def test_only_successful_timer_runs_are_dropped(message: str, level: int, kept: bool) -> None:
    assert QuietTimers().filter(record(message, level)) is kept
