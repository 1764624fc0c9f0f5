"""`spec.source` to a StreamSource and back, through the kinds' table
(`sources/registry.py`): the operator's lister (shards, backlog probes), the worker
environment that names the source, and the worker's readers from that environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.kind import Identity, ReaderSettings, Settings, StreamKind
from streamconsumer.sources.registry import kind_named, selected


def make_source(source: BaseModel, identity: Identity = None) -> StreamSource:
    """The operator's view of the stream: shards with lineage, backlog probes; its calls
    made as `identity` (None: the process's own)."""
    kind, spec = selected(source)
    return kind.lister(spec, identity)


def source_settings(source: BaseModel) -> Settings:
    """The worker's environment settings that name the source: its kind (`source`) and
    the kind's own."""
    kind, spec = selected(source)
    return {"source": kind.name, **kind.settings_of(spec)}


def spec_from_settings(name: str, settings: Mapping[str, Any]) -> tuple[StreamKind[Any], BaseModel]:
    """The inverse of `source_settings`: the kind named `name` and its spec, from its
    settings."""
    kind = kind_named(name)
    return kind, kind.spec_from_settings(settings)


def reader_source(name: str, settings: Mapping[str, Any], reader: ReaderSettings) -> StreamSource:
    """A worker's view of the stream, from its settings: readers (subscribing ones where
    the spec says)."""
    kind, spec = spec_from_settings(name, settings)
    return kind.reader(spec, reader)
