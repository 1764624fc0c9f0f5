"""The stream kinds, in one table: every module of `sources/kinds/` declaring a `KIND`
(`sources/kind.py`), in the order of their names; `spec.source.<name>` selects one."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from pydantic import BaseModel

from streamconsumer.sources import kinds
from streamconsumer.sources.kind import StreamKind


def _found() -> dict[str, StreamKind[Any]]:
    modules = sorted(module.name for module in pkgutil.iter_modules(kinds.__path__))
    declared = [importlib.import_module(f"{kinds.__name__}.{name}").KIND for name in modules]
    return {kind.name: kind for kind in declared}


KINDS: dict[str, StreamKind[Any]] = _found()


def kind_named(name: str) -> StreamKind[Any]:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown kind of source {name!r}: one of {', '.join(KINDS)}") from None


def selected(source: BaseModel) -> tuple[StreamKind[Any], BaseModel]:
    """The kind a source spec names and its part of the spec: the one field that is set
    (`models.source.source_model`: one field per kind, named as the kind)."""
    chosen = [
        (info.alias or field, value)
        for field, info in type(source).model_fields.items()
        if (value := getattr(source, field)) is not None
    ]
    if len(chosen) != 1:
        raise ValueError(f"set exactly one source: one of {', '.join(KINDS)}")
    name, spec = chosen[0]
    return kind_named(name), spec
