"""A processor for `streamconsumer deadletters redrive` in tests: each record it takes is a
JSON line [shard, sequence, partition key, data] in the file REDRIVE_OUT names; a record
whose data is `poison` raises, as the bug not yet fixed."""

from __future__ import annotations

import json
import os

from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo

OUT_ENV = "REDRIVE_OUT"


class Collect(BaseRecordProcessor):
    def initialize(self, shard: ShardInfo) -> None:
        self.shard_id = shard.shard_id

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if any(record.data == b"poison" for record in records):
            raise ValueError("still poison")
        with open(os.environ[OUT_ENV], "a") as out:
            for r in records:
                row = [self.shard_id, r.sequence_number, r.partition_key, r.data.decode()]
                out.write(json.dumps(row) + "\n")
        checkpointer.checkpoint()
