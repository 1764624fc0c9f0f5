"""`spec.source` to a StreamSource and back, through the kinds' table
(`sources/registry.py`): the operator's lister (shards, backlog probes), the worker's
readers, and the worker environment that names the source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from streamconsumer.sources.base import (
    Identity,
    ReaderSettings,
    Settings,
    StreamKind,
    StreamSource,
)
from streamconsumer.sources.registry import kind_named, selected


def make_source(source: BaseModel, identity: Identity = None) -> StreamSource:
    """The operator's view of the stream: shards with lineage, backlog probes; its calls
    made as `identity` (None: the process's own)."""
    kind, spec = selected(source)
    return kind.lister(spec, identity)


def reader_source(source: BaseModel, settings: ReaderSettings) -> StreamSource:
    """A worker's view of the stream: readers (subscribing ones where the spec says)."""
    kind, spec = selected(source)
    return kind.reader(spec, settings)


def source_settings(source: BaseModel) -> Settings:
    """The worker's environment settings (WorkerConfig fields) that name the source."""
    kind, spec = selected(source)
    return {"source": kind.name, **kind.settings(spec)}


def spec_from_settings(settings: Mapping[str, Any]) -> tuple[StreamKind[Any], BaseModel]:
    """The inverse of `source_settings`: the kind and its spec, from a worker's settings."""
    kind = kind_named(str(settings.get("source")))
    return kind, kind.spec_from_settings(settings)
