"""What both sides' processors do with a batch, the same on each: one line per record
(shard, sequence number, the put time the producer wrote into the data, the time now)
appended to a file of this process's own in one write. The benchmark reads these files
to check that every record was processed and to measure latency and hand-over times.

Standard library only: the KCL side imports it in kclpy's Python child processes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

OUT_ENV = "PEERS_OUT"
WORKER_ENV = "PEERS_WORKER"


def payload(size: int = 100) -> bytes:
    """A record's data: its put time first, then padding up to `size` bytes."""
    return f"{time.time():.6f} ".encode().ljust(size, b"x")


class Tally:
    def __init__(self, worker: str | None = None) -> None:
        directory = os.environ[OUT_ENV]
        os.makedirs(directory, exist_ok=True)
        name = worker or os.environ.get(WORKER_ENV, "worker")
        path = os.path.join(directory, f"{name}.{os.getpid()}.tsv")
        self.worker = name
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(self, shard: str, records: Iterable[tuple[str, bytes]]) -> None:
        now = f"{time.time():.6f}"
        lines = "".join(
            f"{shard} {seq} {data[:17].split(b' ', 1)[0].decode()} {now} {self.worker}\n"
            for seq, data in records
        )
        if lines:
            os.write(self._fd, lines.encode())
