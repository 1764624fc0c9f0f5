"""A loop in a daemon thread, for the test bed's and the benchmarks' watchers."""

from __future__ import annotations

import threading
from typing import Self


class BackgroundLoop:
    """Runs `_run` in a daemon thread from start() until stop(), which sets `_stopping`
    (the loop's to check) and waits `join_seconds` at most; also a context manager."""

    join_seconds = 10.0

    def __init__(self, name: str | None = None) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(self.join_seconds)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        raise NotImplementedError
