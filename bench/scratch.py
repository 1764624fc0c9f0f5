"""Where a benchmark runs: a scratch directory and a local control plane in it."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testbed.controlplane import ControlPlane


@contextlib.contextmanager
def scratch_plane(prefix: str) -> Iterator[tuple[Path, ControlPlane]]:
    """A new scratch directory (its name starting with `prefix`) and a control plane in
    it; both removed on exit."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        plane = ControlPlane.start(work / "cp")
        try:
            yield work, plane
        finally:
            plane.remove()
    finally:
        shutil.rmtree(work, ignore_errors=True)
