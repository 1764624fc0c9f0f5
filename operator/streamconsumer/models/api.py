"""Worker <-> operator messages (docs/design.md#protocol), shared by both sides.

A worker joins, renews and leaves through heartbeats; it checkpoints through its own call.
Every lease carries an epoch, bumped on each grant: a message under an older epoch is
refused (fencing).

Versions (docs/design.md#versions-differ): workers run in users' images, so the two sides
are often of different releases. Every message ignores fields it does not know
(`WireModel`), and every call carries the sender's wire version in a header, answered
with the operator's own. A header rather than a body field: it is read before the body
(a 413 or a 400 still says which wire the operator speaks), one place on each side sets
it for every call and every answer, errors included, and the messages stay free of
transport matters. A request without it is version 1, the wire before versions.

Bounds (docs/design.md#one-bad-client-hurts-only-itself): every number has one, so no
worker can make the operator hold or write what the status cannot (an int64), and the
body limits below are sized from the largest message a current worker can legally send."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BeforeValidator, Field, model_validator

from streamconsumer.models.base import WireModel
from streamconsumer.models.resource import SequenceNumber, ShardCheckpoint
from streamconsumer.shard_end import SHARD_END as SHARD_END  # re-exported: a public name here

WIRE_VERSION = 3
"""This release's wire. 2: unknown fields ignored, bounded numbers, the version header.
3: an assignment may carry the consumer's end, and the worker stops there."""
ENDS_WIRE_VERSION = 3
"""The oldest wire whose workers keep an assignment's `end`: the shards of a bounded
consumer go to none older (an older worker would ignore the end and read past it)."""
OLDEST_WIRE_VERSION = 1
"""The oldest a worker may speak to this operator: version N serves N and N-1."""
WIRE_VERSION_HEADER = "StreamConsumer-Wire-Version"


def wire_version(header: str | None) -> int | None:
    """The version a peer's header says (none: 1, the wire before versions); None if
    it is not a version number (ASCII digits only: `str.isdigit` takes "²" and "٣")."""
    raw = "1" if header is None else header.strip()
    return int(raw) if re.fullmatch(r"[0-9]{1,9}", raw) else None


MAX_WIRE_INT = 2**53 - 1
"""The largest integer every JSON reader holds exactly (and far inside an int64)."""
MAX_MILLIS_BEHIND = 366 * 24 * 3600 * 1000
"""A year: Kinesis' longest retention (DynamoDB Streams keeps 24 hours). A record cannot
be further behind than the stream keeps it; a worker reports more as this."""
MAX_HELD_SHARDS = 1000
"""Shards one worker may hold: the status' budget of open shards, so a single worker can
still hold them all. The lease engine never grants a worker more."""
MAX_REPORT_CHARS = 256
"""The length of an error text in a report (failing, passedOver): enough to say what
failed; longer texts are cut, by the worker before sending and by the operator on reading
(a report is informative, so a longer one from an older worker is shortened, not refused)."""

HELD_SHARD_BYTES = 5 * 1024
"""The largest held shard a current worker sends, as JSON: ids and numbers at their
bounds, a failing report and one passed-over note per action, report texts of
MAX_REPORT_CHARS characters of 4 UTF-8 bytes each (measured in tests/unit/test_wire_versions.py)."""
HEARTBEAT_ENVELOPE_BYTES = 2 * 1024
"""A heartbeat without its held shards (the worker name at 253 characters, 4 bytes each)."""
MIN_HEARTBEAT_BYTES = 256 * 1024
"""No heartbeat limit is below this: a worker of the previous wire sends one passed-over
note per skipped batch (up to 100 per shard, texts up to 2048 characters), not one per
action; 256 KiB lets a small consumer's older workers report a hundred of them."""
CHECKPOINT_BODY_BYTES = 4 * 1024
"""A checkpoint request at its bounds is about 700 bytes."""
MAX_CHECKPOINT_HOLD_SECONDS = 10.0
"""The longest the operator holds a `wait: true` checkpoint for its status write."""


def checkpoint_hold_seconds(lease_seconds: float) -> float:
    """How long the operator holds a `wait: true` checkpoint until a status write holds it,
    before answering `persisted: false` (the worker then sends it again). A third of the
    worker lease: a worker waits this plus its request timeout, so a closing request sent
    to a replica that froze or died is sent again, to the new leader, within one lease
    (docs/design.md#crash-safe-operator)."""
    return min(MAX_CHECKPOINT_HOLD_SECONDS, lease_seconds / 3)


def heartbeat_body_limit(max_held: int) -> int:
    """The largest heartbeat body accepted from a worker that may hold `max_held` shards:
    about 5 MiB for MAX_HELD_SHARDS, 256 KiB for small consumers (messages are usually
    under 10 KiB)."""
    held = min(max(max_held, 0), MAX_HELD_SHARDS)
    return max(MIN_HEARTBEAT_BYTES, HEARTBEAT_ENVELOPE_BYTES + held * HELD_SHARD_BYTES)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def report_text(value: object) -> object:
    """An error text fit for a report: one line, valid UTF-8 (a lone surrogate from a
    decoded file name cannot be sent), at most MAX_REPORT_CHARS characters."""
    if not isinstance(value, str):
        return value  # not text: the field's own validation says so
    text = value.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL.sub(" ", text)[:MAX_REPORT_CHARS]


ReportText = Annotated[str, BeforeValidator(report_text)]
WorkerName = Annotated[str, Field(min_length=1, max_length=253)]
PROCESS_SEPARATOR = "#"
"""Between a pod's name and a process' index in a worker name (`pod#1`): no pod's name
holds it (DNS-1123), so a process' name is never another pod's."""
_PROCESS_WORKER = re.compile(rf"(.+){PROCESS_SEPARATOR}(0|[1-9][0-9]{{0,2}})")


def process_worker(pod: str, index: int) -> str:
    """The worker name of process `index` of a pod running processor.processes of them."""
    return f"{pod}{PROCESS_SEPARATOR}{index}"


def worker_process(worker: str) -> tuple[str, int | None]:
    """The pod a worker name is of, and the process' index (None: the pod's one worker).
    One spelling per process: `pod#07` is no process' name."""
    match = _PROCESS_WORKER.fullmatch(worker)
    return (match.group(1), int(match.group(2))) if match else (worker, None)


def worker_pod(worker: str) -> str:
    """The pod a worker name speaks for: the pod itself, or the pod of one of its
    processes (docs/parallelism.md#processes)."""
    return worker_process(worker)[0]


ShardId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
"""Kinesis and DynamoDB Streams shard ids: letters, digits, `_.:-`, up to 128."""
Epoch = Annotated[int, Field(ge=1, le=MAX_WIRE_INT)]
"""A lease's epoch: 1 from the first grant on (a claim under epoch 0 claims nothing)."""


class Failing(WireModel):
    """A batch of the shard keeps raising."""

    attempts: int = Field(ge=1, le=MAX_WIRE_INT)
    seconds: float = Field(
        ge=0, le=1e9, allow_inf_nan=False, description="Since its first failure."
    )
    error: ReportText
    blocked: bool = Field(
        description="Retries are used up and the policy is block, or a call is hung."
    )


class PassedOver(WireModel):
    """Records the failure policy skipped or dead-lettered (reported once, for an Event).
    A current worker sends one note per action, adding up the batches since the last
    heartbeat: `count` records between `firstSequence` and `lastSequence`."""

    action: Literal["skip", "deadLetter"]
    first_sequence: SequenceNumber
    last_sequence: SequenceNumber
    count: int = Field(ge=1, le=MAX_WIRE_INT)
    error: ReportText

    def merged(self, later: PassedOver) -> PassedOver:
        """This note and a later one of the same action, as one."""
        return PassedOver(
            action=self.action,
            first_sequence=min(self.first_sequence, later.first_sequence, key=int),
            last_sequence=max(self.last_sequence, later.last_sequence, key=int),
            count=min(self.count + later.count, MAX_WIRE_INT),
            error=later.error,
        )


class HeldShard(WireModel):
    shard_id: ShardId
    epoch: Epoch
    sequence_number: SequenceNumber | None = Field(
        default=None, description="Last record processed (not necessarily checkpointed)."
    )
    millis_behind_latest: int | None = Field(default=None, ge=0, le=MAX_MILLIS_BEHIND)
    failing: Failing | None = None
    passed_over: list[PassedOver] = Field(default_factory=list, max_length=100)


class HeartbeatRequest(WireModel):
    worker: WorkerName
    held: list[HeldShard] = Field(default_factory=list, max_length=MAX_HELD_SHARDS)
    draining: bool = Field(default=False, description="True from SIGTERM on: take nothing new.")


class StartPositionType(StrEnum):
    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"
    AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"


class StartPosition(WireModel):
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


class Assignment(WireModel):
    shard_id: ShardId
    epoch: Epoch
    start: StartPosition
    parents: list[ShardId] = Field(default_factory=list, max_length=2)
    end: AwareDatetime | None = Field(
        default=None,
        description="A bounded consumer's end (wire 3): no record that arrived after it is "
        "delivered, and the shard is checkpointed at SHARD_END there.",
    )


class RevocationReason(StrEnum):
    HANDOFF = "handoff"  # planned move: finish the batch, checkpoint, release
    LOST = "lost"  # the lease is gone (expired or fenced): stop at once, no checkpoint


class Revocation(WireModel):
    """Sent for a shard the operator counts as the worker's. A hand-off of a shard the
    worker does not run (the grant never reached it) is answered with a release of that
    epoch: the worker then never starts the shard under it."""

    shard_id: ShardId
    epoch: Epoch
    reason: RevocationReason


class HeartbeatResponse(WireModel):
    lease_duration_ms: int = Field(ge=1, le=MAX_WIRE_INT)
    assignments: list[Assignment] = Field(default_factory=list)
    revocations: list[Revocation] = Field(default_factory=list)
    next_heartbeat_ms: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WIRE_INT,
        description="Heartbeat again this soon: grants for this worker are being saved.",
    )


class CheckpointRequest(WireModel):
    worker: WorkerName
    shard_id: ShardId
    epoch: Epoch
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


class CheckpointResponse(WireModel):
    shard_id: ShardId
    epoch: int = Field(ge=0, le=MAX_WIRE_INT)
    # None: the shard has no checkpoint yet (a release before any record).
    checkpoint: ShardCheckpoint | None = None
    persisted: bool

    def wire(self) -> dict[str, Any]:
        """With `checkpoint` even when None: workers up to this release require the key,
        and a release they could not read was sent again until the lease ran out."""
        return {"checkpoint": None, **super().wire()}


class ErrorResponse(WireModel):
    error: Literal[
        "bad_request",
        "unauthorized",
        "forbidden",
        "lease_lost",
        "not_found",
        "method_not_allowed",
        "too_large",
        "unavailable",
        "internal",
    ]
    message: str
