"""The clickstream pipeline into Delta through Spark Connect, as a thin worker runs it, with
a death planted once: the first worker process to commit a second batch is SIGKILLed
right after the commit, before its checkpoint (DIE_ONCE_MARKER, created atomically, says
it happened), so the next owner of the shard replays a batch the table already holds."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from clickstream.pipeline import PageViewsOnSpark
from pyspark.sql import DataFrame

from streamconsumer.spark import BatchInfo, Sink

MARKER_ENV = "DIE_ONCE_MARKER"


@dataclass
class DiesOnceAfterCommit:
    sink: Sink
    marker: str
    writes: int = 0

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        self.sink.write(df, batch)
        self.writes += 1
        if self.writes == 2 and _first_to_claim(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)


def _first_to_claim(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class PageViewsDyingOnce(PageViewsOnSpark):
    def __init__(self) -> None:
        super().__init__()
        self.sink = DiesOnceAfterCommit(self.sink, os.environ[MARKER_ENV])
