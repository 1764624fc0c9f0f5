"""The node's cgroup root: one directory of ours in each mounted cgroup hierarchy, under
which the kubelet puts every pod (its `cgroupRoot`). Nothing else of the machine's
cgroups is touched; at the end the processes left in it are killed by PID and the
directories removed, deepest first."""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from pathlib import Path

MOUNTS = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1, and the v2 one of a hybrid set-up)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and fields[4].startswith(str(MOUNTS)):
            found.append(Path(fields[4]))
    return found


def create(root: str) -> None:
    """The kubelet requires its cgroupRoot to exist in every hierarchy. A new cpuset
    cgroup has no CPUs or memory nodes until given its parent's."""
    for hierarchy in hierarchies():
        directory = hierarchy / root.lstrip("/")
        directory.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (directory / name).exists():
                (directory / name).write_text((hierarchy / name).read_text())


def pids(root: str, leaf: str | None = None) -> set[int]:
    """Processes under `root` (in cgroup directories named `leaf`, if given)."""
    found: set[int] = set()
    for hierarchy in hierarchies():
        pattern = f"{leaf}/cgroup.procs" if leaf else "cgroup.procs"
        for procs in (hierarchy / root.lstrip("/")).rglob(pattern):
            with suppress(OSError):
                found.update(int(pid) for pid in procs.read_text().split())
    return found


def kill(root: str) -> None:
    for pid in pids(root):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove(root: str, timeout: float = 10.0) -> None:
    """Kills what is left under `root`, then removes its directories, deepest first."""
    kill(root)
    deadline = time.monotonic() + timeout
    for hierarchy in hierarchies():
        top = hierarchy / root.lstrip("/")
        if not top.exists():
            continue
        below = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
        for directory in [*below, top]:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:  # its last processes are still exiting
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
