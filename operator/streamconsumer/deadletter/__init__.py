"""Dead-letter targets of the failure policy: one module per target behind one small
interface (`base.Target`), each letter checked against its target's limit first
(`base.DeadLetters`), chosen by `writer_for`."""

from __future__ import annotations

from streamconsumer.deadletter.base import (
    DeadLetters,
    DeadLetterWriter,
    FailedBatch,
    LetterTooLarge,
    Target,
)
from streamconsumer.models.failure import DeadLetterTarget, S3DeadLetters

__all__ = ["DeadLetterWriter", "DeadLetters", "FailedBatch", "LetterTooLarge", "writer_for"]


def writer_for(target: DeadLetterTarget) -> DeadLetters:
    overflow = _s3(target.overflow_s3) if target.overflow_s3 is not None else None
    return DeadLetters(_target(target), DeadLetters(overflow) if overflow else None)


def _target(target: DeadLetterTarget) -> Target:
    if target.kinesis is not None:
        from streamconsumer.deadletter.kinesis import KinesisDeadLetters

        return KinesisDeadLetters(target.kinesis)
    if target.sqs is not None:
        from streamconsumer.deadletter.sqs import SqsDeadLetters

        return SqsDeadLetters(target.sqs)
    assert target.s3 is not None, "the CRD requires exactly one target"
    return _s3(target.s3)


def _s3(target: S3DeadLetters) -> Target:
    from streamconsumer.deadletter.s3 import S3DeadLetters as Writer

    return Writer(target)
