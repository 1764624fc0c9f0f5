"""The stream a worker reads, from its configuration (through the kinds' table)."""

from __future__ import annotations

from streamconsumer.sources.base import ReaderSettings, StreamSource
from streamconsumer.sources.factory import spec_from_settings
from streamconsumer.worker.config import WorkerConfig


def worker_source(config: WorkerConfig) -> StreamSource:
    kind, spec = spec_from_settings(config.model_dump())
    settings = ReaderSettings(
        max_records=config.max_records,
        namespace=config.namespace,
        consumer=config.consumer,
        resubscribe_seconds=config.resubscribe_seconds,
    )
    return kind.reader(spec, settings)
