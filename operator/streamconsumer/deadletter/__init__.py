"""Dead-letter targets of the failure policy: one module per target behind one small
interface (`base.DeadLetterWriter`), chosen by `writer_for`."""

from __future__ import annotations

from streamconsumer.deadletter.base import DeadLetterWriter, FailedBatch
from streamconsumer.models.failure import DeadLetterTarget

__all__ = ["DeadLetterWriter", "FailedBatch", "writer_for"]


def writer_for(target: DeadLetterTarget) -> DeadLetterWriter:
    if target.kinesis is not None:
        from streamconsumer.deadletter.kinesis import KinesisDeadLetters

        return KinesisDeadLetters(target.kinesis)
    if target.sqs is not None:
        from streamconsumer.deadletter.sqs import SqsDeadLetters

        return SqsDeadLetters(target.sqs)
    assert target.s3 is not None, "the CRD requires exactly one target"
    from streamconsumer.deadletter.s3 import S3DeadLetters

    return S3DeadLetters(target.s3)
