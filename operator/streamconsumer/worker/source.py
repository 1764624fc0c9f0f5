"""The stream a worker reads, from its configuration (`sources/factory.py`)."""

from __future__ import annotations

from streamconsumer.sources.base import StreamSource
from streamconsumer.sources.factory import reader_source
from streamconsumer.sources.kind import ReaderSettings
from streamconsumer.worker.config import WorkerConfig


def worker_source(config: WorkerConfig) -> StreamSource:
    reader = ReaderSettings(
        max_records=config.max_records,
        namespace=config.namespace,
        consumer=config.consumer,
        resubscribe_seconds=config.resubscribe_seconds,
    )
    return reader_source(config.source, config.source_settings, reader)
