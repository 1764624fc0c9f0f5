"""Worker <-> operator messages (DESIGN §2), shared by both sides.

A worker joins, renews and leaves through heartbeats; it checkpoints through its own call.
Every lease carries an epoch, bumped on each grant: a message under an older epoch is
refused (fencing)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from streamconsumer.core.lineage import SHARD_END as SHARD_END  # re-exported: a public name here
from streamconsumer.models.base import Model
from streamconsumer.models.resource import SequenceNumber, ShardCheckpoint

WorkerName = Annotated[str, Field(min_length=1, max_length=253)]
ShardId = Annotated[str, Field(min_length=1, max_length=128)]


class Failing(Model):
    """A batch of the shard keeps raising."""

    attempts: int = Field(ge=1)
    seconds: float = Field(ge=0, description="Since its first failure.")
    error: str = Field(max_length=2048)
    blocked: bool = Field(
        description="Retries are used up and the policy is block, or a call is hung."
    )


class PassedOver(Model):
    """Records the failure policy skipped or dead-lettered (reported once, for an Event)."""

    action: Literal["skip", "deadLetter"]
    first_sequence: SequenceNumber
    last_sequence: SequenceNumber
    count: int = Field(ge=1)
    error: str = Field(max_length=2048)


class HeldShard(Model):
    shard_id: ShardId
    epoch: int = Field(ge=0)
    sequence_number: SequenceNumber | None = Field(
        default=None, description="Last record processed (not necessarily checkpointed)."
    )
    millis_behind_latest: int | None = Field(default=None, ge=0)
    failing: Failing | None = None
    passed_over: list[PassedOver] = Field(default_factory=list, max_length=100)


class HeartbeatRequest(Model):
    worker: WorkerName
    held: list[HeldShard] = Field(default_factory=list, max_length=10000)
    draining: bool = Field(default=False, description="True from SIGTERM on: take nothing new.")


class StartPositionType(StrEnum):
    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"
    AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"


class StartPosition(Model):
    type: StartPositionType
    sequence_number: SequenceNumber | None = None
    timestamp: datetime | None = None

    @model_validator(mode="after")
    def _has_what_the_type_needs(self) -> StartPosition:
        if (self.type is StartPositionType.AFTER_SEQUENCE_NUMBER) != (
            self.sequence_number is not None
        ):
            raise ValueError("sequenceNumber goes with AFTER_SEQUENCE_NUMBER, and only with it")
        if (self.type is StartPositionType.AT_TIMESTAMP) != (self.timestamp is not None):
            raise ValueError("timestamp goes with AT_TIMESTAMP, and only with it")
        return self


class Assignment(Model):
    shard_id: ShardId
    epoch: int = Field(ge=1)
    start: StartPosition
    parents: list[ShardId] = Field(default_factory=list, max_length=2)


class RevocationReason(StrEnum):
    HANDOFF = "handoff"  # planned move: finish the batch, checkpoint, release
    LOST = "lost"  # the lease is gone (expired or fenced): stop at once, no checkpoint


class Revocation(Model):
    """Sent for a shard the operator counts as the worker's. A hand-off of a shard the
    worker does not run (the grant never reached it) is answered with a release of that
    epoch: the worker then never starts the shard under it."""

    shard_id: ShardId
    epoch: int = Field(ge=1)
    reason: RevocationReason


class HeartbeatResponse(Model):
    lease_duration_ms: int = Field(ge=1)
    assignments: list[Assignment] = Field(default_factory=list)
    revocations: list[Revocation] = Field(default_factory=list)
    next_heartbeat_ms: int | None = Field(
        default=None,
        ge=1,
        description="Heartbeat again this soon: grants for this worker are being saved.",
    )


class CheckpointRequest(Model):
    worker: WorkerName
    shard_id: ShardId
    epoch: int = Field(ge=1)
    sequence_number: ShardCheckpoint | None = Field(
        default=None, description="None releases without a new checkpoint (needs release)."
    )
    release: bool = Field(default=False, description="Give the lease up after this checkpoint.")
    wait: bool = Field(default=False, description="Answer only once the checkpoint is in status.")

    @model_validator(mode="after")
    def _checkpoint_or_release(self) -> CheckpointRequest:
        if self.sequence_number is None and not self.release:
            raise ValueError("give a sequenceNumber, or release the lease")
        return self


class CheckpointResponse(Model):
    shard_id: ShardId
    epoch: int
    checkpoint: ShardCheckpoint | None
    persisted: bool


class ErrorResponse(Model):
    error: Literal[
        "bad_request", "unauthorized", "forbidden", "lease_lost", "not_found", "unavailable"
    ]
    message: str
