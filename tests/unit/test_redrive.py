"""The redrive's pure parts (deadletter/redrive.py, deadletter/inbox.py): what counts as
redriven is what the processor checkpointed, whole KPL aggregates only; hostile or foreign
messages are not letters."""

from __future__ import annotations

import base64
import json

import pytest

from streamconsumer.deadletter.inbox import Held, parsed
from streamconsumer.deadletter.redrive import records_of, to_processor
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record


def letter(sequence: int, sub: int | None = None, data: bytes = b"d", shard: str = "s-1") -> Held:
    document = {
        "consumer": "ns/c",
        "shardId": shard,
        "sequenceNumber": str(sequence),
        "subSequenceNumber": sub,
        "partitionKey": "k",
        "data": base64.b64encode(data).decode(),
    }
    return Held(document, place=(sequence, sub))


class Buffering(BaseRecordProcessor):
    """Commits (checkpoints) only when asked to shut down, as a batching processor."""

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if any(r.data == b"poison" for r in records):
            raise ValueError("poison")

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        checkpointer.checkpoint()


class EachCall(BaseRecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if any(r.data == b"poison" for r in records):
            raise ValueError("poison")
        checkpointer.checkpoint()


def places(held: list[Held]) -> list[object]:
    return [h.place for h in held]


def test_a_checkpoint_covers_whole_aggregates_only() -> None:
    held = [letter(1, 0), letter(1, 1), letter(2, 0), letter(2, 1), letter(3)]
    assert [r.checkpoint_sequence for r in records_of(held)] == [None, "1", "1", "2", "3"]


def test_what_counts_is_what_the_processor_checkpointed() -> None:
    held = [letter(1), letter(2), letter(3, data=b"poison"), letter(4), letter(5, shard="s-2")]
    removed: list[Held] = []
    outcome = to_processor(held, EachCall, "ns/c", 1, advanced=lambda _: None, done=removed.extend)
    assert places(outcome.redriven) == [(1, None), (2, None), (5, None)]
    assert removed == outcome.redriven, "each shard's removed as it ends"
    assert outcome.failed == {"s-1": "ValueError: poison"}


def test_a_batching_processor_counts_what_it_committed_at_shutdown() -> None:
    held = [letter(1), letter(2), letter(3)]
    outcome = to_processor(held, Buffering, "ns/c", 2, advanced=lambda _: None, done=lambda _: None)
    assert places(outcome.redriven) == places(held)


def test_a_poisoned_aggregate_keeps_its_whole_aggregate() -> None:
    held = [letter(1, 0), letter(1, 1), letter(2, 0), letter(2, 1, data=b"poison")]
    outcome = to_processor(held, EachCall, "ns/c", 1, advanced=lambda _: None, done=lambda _: None)
    assert places(outcome.redriven) == [(1, 0), (1, 1)], "2.0 returned, but 2.1 did not"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        json.dumps({"consumer": "ns/other", "shardId": "s", "sequenceNumber": "1"}),
        json.dumps({"consumer": "ns/c", "shardId": "s", "sequenceNumber": "x", "data": ""}),
        json.dumps({"consumer": "ns/c", "shardId": "s", "sequenceNumber": "1", "data": "!!"}),
        json.dumps({"consumer": "ns/c", "sequenceNumber": "1", "data": ""}),
    ],
)
def test_what_is_not_a_letter_of_the_consumer_is_passed_by(body: bytes | str) -> None:
    assert parsed(body, "ns/c") is None
