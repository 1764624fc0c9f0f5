"""What a kind of stream declares to be one (`StreamKind`): a module of
`sources/kinds/` each, found by `sources/registry.py`. Nothing here imports boto3 or the
readers: the models build the CRD's `spec.source` from these declarations, and the CLI
installs no AWS library."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    import boto3

    from streamconsumer.sources.base import ConsumerRegistration, StreamSource

Spec = TypeVar("Spec", bound=BaseModel)

Settings = dict[str, str | None]
"""A kind's part of the worker's environment: setting name -> value."""

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


@dataclass(frozen=True)
class FanOutSupport(Generic[Spec]):
    """A kind whose readers may subscribe through a registered consumer: whether a spec
    asks for it (cheap: the operator's handlers filter on it), the registration
    (for the operator), and the consumer's name for a resource."""

    uses: Callable[[Spec], bool]
    registration: Callable[[Spec, Identity], ConsumerRegistration]
    consumer_name: Callable[[str, str], str]  # (namespace, name) -> the consumer's name


@dataclass(frozen=True)
class Access(Generic[Spec]):
    """What the operator's access policy matches for a kind
    (docs/security.md#aws-access): the stream's name and the ARN the spec names (None
    when named by name), the word a refusal calls it ("stream", "table"), the AWS
    services whose own endpoints the policy's "aws" stands for (host labels such as
    "kinesis"), and the IAM actions the operator calls (what a denial asks for)."""

    names: Callable[[Spec], tuple[str, str | None]]
    noun: str
    services: tuple[str, ...]
    actions: tuple[str, ...]


@dataclass(frozen=True)
class StreamKind(Generic[Spec]):
    """One kind of stream: its field in `spec.source` (camelCase, also the worker's
    `source` setting) and its title in messages, its spec model, the operator's lister
    (shards, backlog; its clients call as the `Identity` it is given), the worker's
    reader, how its spec travels in the worker's environment, what the access policy
    matches, fan-out support, whether it can start AT_TIMESTAMP, and what its AWS errors
    mean (Degraded and Events say it with the error)."""

    name: str
    title: str
    spec: type[Spec]
    lister: Callable[[Spec, Identity], StreamSource]
    reader: Callable[[Spec, ReaderSettings], StreamSource]
    # The worker's settings: setting name -> the spec field it carries. Once released, a
    # setting keeps its name: workers and operators of different versions read each
    # other's (docs/upgrades.md#operator-and-workers-of-different-versions).
    settings: Mapping[str, str]
    access: Access[Spec] | None = None  # None: no AWS call, nothing to allow
    fan_out: FanOutSupport[Spec] | None = None
    at_timestamp: bool = True
    errors: Mapping[str, str] = field(default_factory=dict)  # AWS error code -> advice

    def settings_of(self, spec: Spec) -> Settings:
        """The spec as the worker's settings carry it."""
        values = {name: getattr(spec, field) for name, field in self.settings.items()}
        return {name: None if value is None else str(value) for name, value in values.items()}

    def spec_from_settings(self, settings: Mapping[str, Any]) -> Spec:
        """The inverse of `settings_of`; a setting not given takes the spec's default."""
        given = {field: settings.get(name) for name, field in self.settings.items()}
        return self.spec.model_validate({k: v for k, v in given.items() if v not in (None, "")})
