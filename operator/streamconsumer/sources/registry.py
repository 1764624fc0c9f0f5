"""The stream kinds, in one table. A new kind is one module declaring its `KIND`
(`sources/base.py`, StreamKind) and one line here; `spec.source.<name>` selects it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from streamconsumer.sources import dynamodb_streams, kinesis
from streamconsumer.sources.base import StreamKind

KINDS: dict[str, StreamKind[Any]] = {
    kind.name: kind
    for kind in (
        kinesis.KIND,
        dynamodb_streams.KIND,
    )
}


def kind_named(name: str) -> StreamKind[Any]:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown kind of source {name!r}: one of {', '.join(KINDS)}") from None


def selected(source: BaseModel) -> tuple[StreamKind[Any], BaseModel]:
    """The kind a source spec names and its part of the spec: the one field that is set
    (`models.resource.Source` has one field per kind, named as the kind)."""
    chosen = [
        (info.alias or field, value)
        for field, info in type(source).model_fields.items()
        if (value := getattr(source, field)) is not None
    ]
    if len(chosen) != 1:
        raise ValueError(f"set exactly one source: one of {', '.join(KINDS)}")
    name, spec = chosen[0]
    return kind_named(name), spec
