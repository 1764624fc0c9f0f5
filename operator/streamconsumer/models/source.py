"""`spec.source`, built from the stream kinds (`sources/registry.py`): one optional field
per kind, named as the kind, its model the kind's spec, and the CEL rules that say
exactly one is set and that it never changes. Also what every AWS kind's spec shares
(`AwsStreamSource`, `named_once`) and how its region and endpoint travel in the worker's
settings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, create_model, model_validator
from pydantic.alias_generators import to_snake

from streamconsumer.models.base import ENDPOINT_URL_PATTERN, Model, with_rules

if TYPE_CHECKING:
    from streamconsumer.sources.kind import StreamKind

NEW_STREAM = "create a new StreamConsumer to read another stream"


def same(field: str) -> str:
    """CEL: an optional field keeps its value (or its absence) across updates."""
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


# The characters AWS allows in a stream's or a table's name.
AWS_NAME_PATTERN = r"^[a-zA-Z0-9_.-]+$"


def name_field(min_length: int, max_length: int, description: str) -> Any:
    """The field that names the stream by name (`named_once`'s `name`)."""
    return Field(
        default=None,
        min_length=min_length,
        max_length=max_length,
        pattern=AWS_NAME_PATTERN,
        description=description,
    )


def arn_field(pattern: str, description: str) -> Any:
    """streamARN, the other way to name the stream (`named_once`)."""
    return Field(
        default=None, alias="streamARN", pattern=pattern, max_length=2048, description=description
    )


def named_once(kind: str, name: str) -> ConfigDict:
    """CEL for `source.<kind>`: the stream is named by its `name` field or by streamARN,
    exactly one, and neither that nor its region can change under a consumer (its
    leases and checkpoints belong to that stream's shards)."""
    return with_rules(
        (
            f"has(self.{name}) != has(self.streamARN)",
            f"set exactly one of source.{kind}.{name} and source.{kind}.streamARN",
        ),
        (same(name), f"{name} cannot change: {NEW_STREAM}"),
        (same("streamARN"), f"streamARN cannot change: {NEW_STREAM}"),
        (same("region"), f"region cannot change: {NEW_STREAM}"),
    )


class AwsStreamSource(Model):
    """What every AWS stream source has beside its stream: a region, fixed with the
    stream (`named_once`), and a custom endpoint, which may change."""

    region: str | None = Field(
        default=None, max_length=64, description="AWS region; defaults to the operator's."
    )
    endpoint_url: str | None = Field(
        default=None,
        alias="endpointURL",
        max_length=2048,
        pattern=ENDPOINT_URL_PATTERN,
        description="Custom endpoint (a VPC endpoint, or an emulator in tests).",
    )


# An AWS source's region and endpoint in the worker's settings (`StreamKind.settings`):
# the same two settings for every AWS kind.
ENDPOINT_SETTINGS = {"region": "region", "endpoint_url": "endpoint_url"}


def source_model(kinds: Iterable[StreamKind[Any]]) -> type[Model]:
    """The `spec.source` model of these kinds: a field per kind, exactly one set, and the
    CEL rules that say so and keep the kind."""
    kinds = list(kinds)
    names = [kind.name for kind in kinds]
    one = "set exactly one source: " + " or ".join(f"source.{name}" for name in names)
    has = ", ".join(f"has(self.{name})" for name in names)
    stays = " && ".join(f"has(self.{name}) == has(oldSelf.{name})" for name in names)

    class Source(Model):
        """Exactly one stream to read."""

        model_config = with_rules(
            (f"[{has}].exists_one(x, x)", one),
            (stays, f"the kind of source cannot change: {NEW_STREAM}"),
        )

        @model_validator(mode="after")
        def _exactly_one(self) -> Source:
            if sum(getattr(self, to_snake(name)) is not None for name in names) != 1:
                raise ValueError(one)
            return self

    fields: dict[str, Any] = {
        to_snake(kind.name): (kind.spec | None, Field(default=None, alias=kind.name))
        for kind in kinds
    }
    return create_model(
        "Source", __base__=Source, __module__=__name__, __doc__=Source.__doc__, **fields
    )


def at_timestamp_rules(kinds: Iterable[StreamKind[Any]]) -> list[tuple[str, str]]:
    """CEL for the spec: a kind without an AT_TIMESTAMP iterator refuses that start."""
    return [
        (
            f"!has(self.source.{kind.name}) || self.initialPosition != 'AT_TIMESTAMP'",
            f"{kind.title} has no AT_TIMESTAMP iterator: use TRIM_HORIZON or LATEST",
        )
        for kind in kinds
        if not kind.at_timestamp
    ]
