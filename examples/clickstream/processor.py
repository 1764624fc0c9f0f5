"""A realistic processor: clickstream events (JSON) -> page views per minute.

Each record is `{"page": "/pricing", "user": "u-42", "ts": "2026-11-22T14:05:09Z"}`.
Counts are kept per shard and flushed (here: logged as JSON lines; in real life a
database or a queue) before the checkpoint moves, so a crash replays only what was
not flushed."""

from __future__ import annotations

import json
import logging
from collections import Counter

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo

log = logging.getLogger("clickstream")


class PageViewsPerMinute(BaseRecordProcessor):
    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.malformed = 0

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        for record in records:
            try:
                event = json.loads(record.data)
                minute = str(event["ts"])[:16]  # 2026-11-22T14:05
                self.counts[(minute, str(event["page"]))] += 1
            except (ValueError, KeyError, TypeError):
                self.malformed += 1  # a bad event must not stop the shard
        self.flush()
        checkpointer.checkpoint()

    def flush(self) -> None:
        for (minute, page), views in sorted(self.counts.items()):
            log.info(json.dumps({"minute": minute, "page": page, "views": views}))
        self.counts.clear()

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        self.flush()
        checkpointer.checkpoint()
