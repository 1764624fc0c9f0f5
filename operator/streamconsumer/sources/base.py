"""What every stream source provides: its shards with lineage, and a reader per shard;
and what a kind of stream declares to be one (`StreamKind`, registered in
`sources/registry.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar, runtime_checkable

from pydantic import BaseModel

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.processor import Record

if TYPE_CHECKING:
    import boto3


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[Record]
    millis_behind_latest: int | None
    shard_end: bool = False  # the shard is closed and every record has been read
    child_shards: tuple[str, ...] = ()


class ShardReader(Protocol):
    shard_id: str

    def read(self) -> ReadResult:
        """The next batch, in order; empty when caught up; after shard end returns
        shard_end again. Raises on errors it could not retry away; calling again resumes
        after the last record returned."""
        ...


@runtime_checkable
class SubscribedReader(ShardReader, Protocol):
    """A reader fed by a push subscription (enhanced fan-out): `read()` itself waits for
    the next event (a bounded time), so its driver does not pause between reads; `close()`
    ends the subscription once the shard is done with."""

    def close(self) -> None: ...


class StreamSource(Protocol):
    def list_shards(self) -> list[Shard]:
        """Every shard still in the stream's retention, open or closed, with parents."""
        ...

    def open_reader(self, shard_id: str, start: StartPosition) -> ShardReader: ...

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        """Milliseconds behind the tip for a reader starting at `start`; None if caught up.
        A closed shard at its end reports its children's backlog (at least 1 ms)."""
        ...

    def incarnation(self) -> str | None:
        """What tells the stream from one deleted and created again under its name (its
        ARN and creation time), for a kind whose shard ids repeat across such streams:
        checkpoints of one are never applied to another (docs/checkpoints.md#the-same-stream).
        None where ids never repeat: checkpoints of another stream name no shard it lists."""
        ...


# --- a kind of stream ------------------------------------------------------------------

Spec = TypeVar("Spec", bound=BaseModel)

Settings = dict[str, str | None]
"""A kind's part of the worker's environment: WorkerConfig field -> value."""

Identity: TypeAlias = "boto3.Session | None"
"""Whom the operator's clients call AWS as: a namespace's assumed role
(`controller/aws/assumed_role.py`), or None for the process's own identity."""


@dataclass(frozen=True)
class ReaderSettings:
    """What a worker's source needs beyond the spec: its batch limit, and the consumer
    resource it reads for (a kind that subscribes names its subscription after it)."""

    max_records: int = 1000
    namespace: str | None = None
    consumer: str | None = None
    resubscribe_seconds: float | None = None  # None: the kind's own period


class ConsumerRegistration(Protocol):
    """A stream consumer registered with the stream (Kinesis enhanced fan-out)."""

    def register(self, name: str) -> str:
        """Registers `name` (idempotent), waits until it is usable; its ARN."""
        ...

    def consumer_arn(self, name: str) -> str | None:
        """The ARN of `name` on this stream; None if it (or the stream) is gone."""
        ...

    def deregister(self, name: str) -> None:
        """Deregisters `name`; done if it is gone already."""
        ...


@dataclass(frozen=True)
class FanOutSupport(Generic[Spec]):
    """A kind whose readers may subscribe through a registered consumer: whether a spec
    asks for it (cheap: the operator's handlers filter on it), the registration
    (for the operator), and the consumer's name for a resource."""

    uses: Callable[[Spec], bool]
    registration: Callable[[Spec, Identity], ConsumerRegistration]
    consumer_name: Callable[[str, str], str]  # (namespace, name) -> the consumer's name


@dataclass(frozen=True)
class StreamKind(Generic[Spec]):
    """One kind of stream: its field in `spec.source` (camelCase, also the worker's
    `source` setting), its spec model, the operator's lister (shards, backlog; its
    clients call as the `Identity` it is given), the worker's reader, how its spec
    travels in the worker's environment, fan-out support, and what its AWS errors mean
    (Degraded and Events say it with the error)."""

    name: str
    spec: type[Spec]
    lister: Callable[[Spec, Identity], StreamSource]
    reader: Callable[[Spec, ReaderSettings], StreamSource]
    settings: Callable[[Spec], Settings]
    spec_from_settings: Callable[[Mapping[str, Any]], Spec]
    fan_out: FanOutSupport[Spec] | None = None
    errors: Mapping[str, str] = field(default_factory=dict)  # AWS error code -> advice
