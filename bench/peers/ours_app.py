"""Our side's record processor (entrypoint `bench.peers.ours_app:PeersProcessor`): what
bench/peers/kcl_app.py does, in our interface: tally the batch, then checkpoint."""

from __future__ import annotations

import os

from bench.peers.tally import Tally
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo


class PeersProcessor(BaseRecordProcessor):
    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.tally = Tally(os.environ.get("POD_NAME"))

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.tally.note(self.shard.shard_id, ((r.sequence_number, r.data) for r in records))
        checkpointer.checkpoint()
