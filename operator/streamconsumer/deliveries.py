"""What `streamconsumer.testing.ProcessorHarness.deliver` reports: the worker's handling of
a batch, record by record. Apart from `testing` so that the worker's harness
(`worker/harness.py`) fills it in without importing the module that imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamconsumer.processor import Record


@dataclass
class Attempt:
    """One process_records call: the records it was given, and how it failed (the text
    the worker logs and reports), or None when it returned with every record done."""

    records: list[Record]
    error: str | None


@dataclass
class GivenUp:
    """Records the failure policy passed over in one step: `action` "skip" or
    "deadLetter", with the error and attempts the Event and the letters carry."""

    action: str
    records: list[Record]
    error: str
    attempts: int


@dataclass
class Delivery:
    """What the worker did with a batch (`ProcessorHarness.deliver`). Each record of the
    batch ends in exactly one of `done`, `skipped`, `dead_lettered` and `left`."""

    attempts: list[Attempt]  # every process_records call, in order: retries, bisected halves
    done: list[Record]  # a call that returned did not report them failed
    skipped: list[Record]  # passed over by then: skip (a RecordsSkipped Event)
    dead_lettered: list[Record]  # written to the dead-letter target, then passed over
    given_up: list[GivenUp]  # the skips and dead-letter writes, in order, with their errors
    letters: list[dict[str, Any]]  # the JSON documents the dead-letter target got
    checkpoints: list[str]  # stored while the batch went through, in order
    blocked: str | None  # the shard blocks, retried for ever: the error Degraded shows
    hung: str | None  # a call ran past timeoutSeconds: reported, the worker restarts
    left: list[Record]  # neither done nor passed over: delivered again
