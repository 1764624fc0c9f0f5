"""Dead letters are measured before they are sent (issue 22.7): what is measured is the
envelope exactly as sent, against the limit its target declares; a letter over it goes to
the overflow if there is one, else nothing is sent and the write says it never can be."""

from __future__ import annotations

import pytest

from streamconsumer.deadletter import DeadLetters, FailedBatch, LetterTooLarge
from streamconsumer.deadletter.base import chunks, encode
from streamconsumer.deadletter.kinesis import KinesisDeadLetters
from streamconsumer.models.failure import KinesisDeadLetters as KinesisTarget
from streamconsumer.processor import Record

from .letter_targets import StubTarget


def failed(*sizes: int) -> FailedBatch:
    records = [Record(b"x" * size, "key", str(100 + i)) for i, size in enumerate(sizes)]
    return FailedBatch("ns/orders", "shardId-000000000003", records, "ValueError: bad", 3)


def test_the_size_measured_is_the_size_sent() -> None:
    (letter,) = encode(failed(1000))
    limit = len(letter.body)
    target = StubTarget("SQS message", limit)
    DeadLetters(target).write(failed(1000))
    (sent,) = target.sent
    assert len(sent.body) == limit, "a letter exactly at the limit is sent"
    assert target.size(sent) == limit


def test_one_byte_over_is_refused_before_anything_is_sent() -> None:
    (letter,) = encode(failed(1000))
    target = StubTarget("SQS message", len(letter.body) - 1)
    with pytest.raises(LetterTooLarge) as refused:
        DeadLetters(target).write(failed(10, 1000))
    assert target.requests == 0, "not even the letter that fits: the batch is retried whole"
    message = str(refused.value)
    assert "record 101 " in message
    assert f"is {len(letter.body)} bytes" in message
    assert f"over the SQS message limit of {len(letter.body) - 1} bytes" in message


def test_letters_too_large_go_to_the_overflow_and_the_others_to_the_target() -> None:
    target = StubTarget("SQS message", 2000)
    bucket = StubTarget("S3 object", 10**9)
    DeadLetters(target, overflow=DeadLetters(bucket)).write(failed(10, 5000, 20))
    assert [letter.record.sequence_number for letter in target.sent] == ["100", "102"]
    assert [letter.record.sequence_number for letter in bucket.sent] == ["101"]


def test_every_letter_of_a_write_carries_one_time() -> None:
    """deadLetteredAt is taken once: its length varies (isoformat drops zero microseconds),
    so a letter measured and then encoded again could differ from what was measured."""
    letters = encode(failed(1, 2, 3))
    assert len({letter.document["deadLetteredAt"] for letter in letters}) == 1


@pytest.mark.parametrize(
    ("sizes", "count", "budget", "expected"),
    [
        ([1] * 25, 10, 1000, [10, 10, 5]),
        ([400, 400, 400, 100], 10, 1000, [2, 2]),
        ([1000, 1, 1000], 10, 1000, [1, 1, 1]),
        ([], 10, 1000, []),
    ],
)
def test_requests_hold_at_most_their_count_and_bytes(
    sizes: list[int], count: int, budget: int, expected: list[int]
) -> None:
    assert [len(chunk) for chunk in chunks(sizes, lambda n: n, count, budget)] == expected


def test_a_kinesis_record_counts_its_partition_key() -> None:
    target = KinesisDeadLetters(KinesisTarget(stream_name="dlq", region="us-east-1"))
    (letter,) = encode(failed(10))
    assert target.size(letter) == len(letter.body) + len(b"key")


@pytest.mark.parametrize(
    ("record_kib", "limit", "fits"),
    [
        (200, 256 * 1024, False),  # SQS's long-time default queue limit
        (190, 256 * 1024, True),
        (780, 1024 * 1024, False),  # Kinesis' record limit
        (760, 1024 * 1024, True),
    ],
)
def test_base64_in_json_makes_a_letter_a_third_larger(
    record_kib: int, limit: int, fits: bool
) -> None:
    (letter,) = encode(failed(record_kib * 1024))
    assert (len(letter.body) <= limit) is fits
