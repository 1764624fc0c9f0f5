"""Measuring both sides the same way: CPU and RSS of whole process trees sampled from
/proc, and the tally files the processors write (bench/peers/tally.py)."""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.background import BackgroundLoop

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its reaped children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / TICK


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0


def tree(roots: Iterable[int]) -> list[int]:
    """The roots and all their descendants that are alive now."""
    parents: dict[int, list[int]] = defaultdict(list)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents[stat[0]].append(int(entry.name))
    found, todo = [], [r for r in roots if Path(f"/proc/{r}").exists()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


@dataclass
class Sample:
    at: float  # wall clock, as the tally's times
    cpu: float  # seconds: live processes of the trees plus their reaped children
    rss: int  # bytes, summed over the trees


class Sampler(BackgroundLoop):
    """Samples the process trees under `roots()` every `period` seconds in a thread.
    CPU of a process that exits between samples is lost unless a root reaped it: the
    roots here (a JVM, a worker) outlive their children, or reap them."""

    join_seconds = 5.0

    def __init__(self, roots: Callable[[], list[int]], period: float = 0.2) -> None:
        self.roots = roots
        self.period = period
        self.samples: list[Sample] = []
        super().__init__()

    def sample(self) -> Sample:
        pids = tree(self.roots())
        cpu = sum(s[1] for s in (_stat(p) for p in pids) if s is not None)
        return Sample(time.time(), cpu, sum(_rss(p) for p in pids))

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.samples.append(self.sample())
            self._stopping.wait(self.period)

    @property
    def peak_rss(self) -> int:
        return max((s.rss for s in self.samples), default=0)

    def cpu_at(self, when: float) -> float:
        """CPU seconds at `when`, interpolated between the samples around it."""
        before = [s for s in self.samples if s.at <= when]
        after = [s for s in self.samples if s.at > when]
        if not before:
            return after[0].cpu if after else 0.0
        if not after:
            return before[-1].cpu
        a, b = before[-1], after[0]
        return a.cpu + (b.cpu - a.cpu) * (when - a.at) / (b.at - a.at)


@dataclass
class Processed:
    shard: str
    seq: str
    put: float
    at: float
    worker: str


@dataclass
class TallyReader:
    """Reads the tally files of one side as they grow, keeping what was read."""

    directory: Path
    records: list[Processed] = field(default_factory=list)
    _offsets: dict[Path, int] = field(default_factory=dict)

    def read(self) -> list[Processed]:
        for path in sorted(self.directory.glob("*.tsv")):
            with path.open("rb") as source:
                source.seek(self._offsets.get(path, 0))
                data = source.read()
            end = data.rfind(b"\n") + 1  # only whole lines: a writer may be mid-line
            self._offsets[path] = self._offsets.get(path, 0) + end
            for line in data[:end].decode().splitlines():
                shard, seq, put, at, worker = line.split(" ")
                self.records.append(Processed(shard, seq, float(put), float(at), worker))
        return self.records

    def distinct(self) -> set[tuple[str, str]]:
        return {(r.shard, r.seq) for r in self.read()}

    def duplicates(self) -> int:
        counts = Counter((r.shard, r.seq) for r in self.read())
        return sum(n - 1 for n in counts.values())

    def missing(self, expected: set[tuple[str, str]]) -> set[tuple[str, str]]:
        return expected - self.distinct()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]
