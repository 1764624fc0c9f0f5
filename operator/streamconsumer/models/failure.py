"""The failure policy: what a worker does with a batch whose `process_records` keeps
raising. Retried with back-off first; then `block` (keep retrying: nothing is ever
passed over), `skip` (checkpoint past it, with an Event) or `deadLetter` (write its
records with the error to a target, then checkpoint past it). No path moves a checkpoint
past a record that is not done, or explicitly passed over here
(docs/design.md#only-what-returned-is-checkpointed)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from streamconsumer.models.base import ENDPOINT_URL_PATTERN, Model, added_since, with_rules
from streamconsumer.models.source import AWS_NAME_PATTERN

_ENDPOINT = Field(
    default=None,
    alias="endpointURL",
    max_length=2048,
    pattern=ENDPOINT_URL_PATTERN,
    description="Custom endpoint (a VPC endpoint, or an emulator in tests).",
)
_REGION = Field(default=None, max_length=64, description="AWS region; defaults to the worker's.")


class KinesisDeadLetters(Model):
    """One record per failed record, with the same partition key."""

    model_config = with_rules(
        (
            "has(self.streamName) != has(self.streamARN)",
            "set exactly one of streamName and streamARN",
        ),
    )

    stream_name: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=AWS_NAME_PATTERN
    )
    stream_arn: str | None = Field(default=None, alias="streamARN", max_length=2048)
    region: str | None = _REGION
    endpoint_url: str | None = _ENDPOINT


class SqsDeadLetters(Model):
    """One message per failed record."""

    queue_url: str = Field(alias="queueURL", pattern=r"^https?://", max_length=2048)
    region: str | None = _REGION
    endpoint_url: str | None = _ENDPOINT


class S3DeadLetters(Model):
    """One JSON-lines object per failed batch, named by shard and sequence range (a
    replayed batch overwrites its own object)."""

    bucket: str = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$")
    prefix: str = Field(default="", max_length=512)
    region: str | None = _REGION
    endpoint_url: str | None = _ENDPOINT


class DeadLetterTarget(Model):
    model_config = with_rules(
        (
            "[has(self.kinesis), has(self.sqs), has(self.s3)].filter(x, x).size() == 1",
            "set exactly one dead-letter target: kinesis, sqs or s3",
        ),
        (
            "!has(self.overflowS3) || !has(self.s3)",
            "overflowS3 goes with a kinesis or sqs target (an S3 object has room enough)",
        ),
    )

    kinesis: KinesisDeadLetters | None = None
    sqs: SqsDeadLetters | None = None
    s3: S3DeadLetters | None = None
    overflow_s3: S3DeadLetters | None = Field(
        default=None,
        description="Where a letter too large for the kinesis (1 MiB) or sqs (the queue's "
        "MaximumMessageSize) target goes instead. Without it such a record blocks its "
        "shard (Degraded names it), as under `block`.",
    )


class AfterRetries(StrEnum):
    BLOCK = "block"  # keep retrying: the shard waits (Degraded names it)
    SKIP = "skip"  # checkpoint past the batch, with an Event
    DEAD_LETTER = "deadLetter"  # write the batch to `deadLetter`, then checkpoint past it


class FailurePolicy(Model):
    """Retries of a failing batch, then what to do with it. A hand-off or SIGTERM
    interrupts the retries (the next owner starts counting again)."""

    model_config = with_rules(
        (
            "(self.then == 'deadLetter') == has(self.deadLetter)",
            "deadLetter (the target) goes with then: deadLetter, and only with it",
        ),
        (
            "!has(self.maxRecordAgeSeconds) || self.then != 'block'",
            "maxRecordAgeSeconds passes old records over: it goes with then: skip or "
            "deadLetter (block never passes a record over)",
        ),
    )

    retries: int = Field(
        default=3, ge=0, le=1000000, description="Retries of a failing batch before `then`."
    )
    retry_for_seconds: float | None = Field(
        default=None,
        gt=0,
        le=604800,
        description="Or stop retrying once the batch has failed for this long, if sooner.",
    )
    initial_backoff_seconds: float = Field(default=0.1, gt=0, le=3600)
    max_backoff_seconds: float = Field(default=30.0, gt=0, le=3600)
    timeout_seconds: float = Field(
        default=900,
        gt=0,
        le=604800,
        description="A processor call still running after this long is hung: the worker "
        "reports it (Degraded), hands its other shards off and restarts; the shard is "
        "processed again from its last checkpoint.",
    )
    max_record_age_seconds: float | None = Field(
        default=None,
        gt=0,
        le=31536000,  # a Kinesis stream's longest retention (365 days)
        description="A failing batch's records that arrived in the stream longer ago than "
        "this are not retried further: they go to `then` (skip or deadLetter) at once, as "
        "Lambda's MaximumRecordAgeInSeconds. Default: no limit.",
        json_schema_extra=added_since("0.2.0"),
    )
    then: AfterRetries = Field(
        default=AfterRetries.BLOCK,
        description="block (default: never pass a record over), skip, or deadLetter.",
    )
    dead_letter: DeadLetterTarget | None = None
