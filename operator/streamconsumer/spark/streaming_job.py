"""What the Structured Streaming jobs (bronze_job, apply_changes) share: `--once` or an
interval as the trigger, and a run to the end that says what the last micro-batch read."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

log = logging.getLogger(__name__)


def add_trigger_arguments(parser: argparse.ArgumentParser, interval: str) -> None:
    parser.add_argument("--once", action="store_true", help="process what is there, then stop")
    parser.add_argument("--interval", default=interval, help=f"between runs (default: {interval})")


def triggered(writer: DataStreamWriter, once: bool, interval: str) -> DataStreamWriter:
    return writer.trigger(availableNow=True) if once else writer.trigger(processingTime=interval)


def run_to_end(query: StreamingQuery) -> None:
    """Waits for the query (forever, unless `--once`), logs its last micro-batch, exits 0."""
    query.awaitTermination()
    progress = query.lastProgress
    log.info(
        "stopped; the last micro-batch read %s rows", progress["numInputRows"] if progress else 0
    )
    sys.exit(0)


def basic_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s level=%(levelname)s %(message)s")
