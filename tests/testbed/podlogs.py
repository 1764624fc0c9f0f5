"""Container logs read straight from a real node's disk, kept after their pods are gone.

The kubelet writes each container's output under /var/log/pods/<ns>_<pod>_<uid>/<container>/
<restart>.log (CRI format: `time stream P|F message`) and deletes it some time after the
pod is deleted. A thread copies every new line as it appears, so a test still has what a
deleted pod wrote."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from testbed.background import BackgroundLoop


@dataclass(frozen=True)
class Stream:
    """One run of one container: its lines come from one process, in order."""

    namespace: str
    pod: str
    container: str
    restart: int


class PodLogs(BackgroundLoop):
    def __init__(self, log_dir: Path, namespace: str, interval: float = 0.2) -> None:
        self.log_dir = log_dir
        self.namespace = namespace
        self.interval = interval
        self._offsets: dict[Path, int] = {}
        self._unfinished: dict[Path, str] = {}  # text after the last newline
        self._continued: dict[Path, str] = {}  # a message cut by the runtime (tag P)
        self._lines: dict[Stream, list[str]] = defaultdict(list)
        self._lock = threading.Lock()
        super().__init__(name="pod-logs")

    def stop(self) -> None:
        super().stop()
        self.poll()  # what was written since the last turn

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        for path in sorted(self.log_dir.glob(f"{self.namespace}_*/*/*.log")):
            try:
                with path.open("rb") as file:
                    file.seek(self._offsets.get(path, 0))
                    data = file.read()
            except FileNotFoundError:
                continue
            if data:
                self._offsets[path] = self._offsets.get(path, 0) + len(data)
                self._add(path, data.decode(errors="replace"))

    def _add(self, path: Path, text: str) -> None:
        namespace, pod, _uid = path.parent.parent.name.split("_", 2)
        stream = Stream(namespace, pod, path.parent.name, int(path.stem))
        lines = (self._unfinished.pop(path, "") + text).split("\n")
        self._unfinished[path] = lines.pop()
        messages: list[str] = []
        for line in lines:
            parts = line.split(" ", 3)
            if len(parts) < 4:
                continue
            _time, _source, tag, message = parts
            message = self._continued.pop(path, "") + message
            if tag == "P":
                self._continued[path] = message
            else:
                messages.append(message)
        with self._lock:
            self._lines[stream].extend(messages)

    def streams(self) -> dict[Stream, list[str]]:
        with self._lock:
            return {stream: list(lines) for stream, lines in self._lines.items()}

    def text(self, pod: str) -> str:
        """Everything the pod's containers wrote, for failure messages."""
        with self._lock:
            return "\n".join(
                line for stream, lines in self._lines.items() if stream.pod == pod for line in lines
            )
