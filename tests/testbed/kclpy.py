"""kclpy's Python package (amazon-kclpy on PyPI) for tests of processors written for it:
its sdist's `amazon_kclpy/` alone, into build/kclpy/ (gitignored), once. Installing the
package would fetch KCL's jars from Maven Central, which a processor run by our worker
never needs."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.peers.install import KCLPY_VERSION  # the one the real KCL runs with

ROOT = Path(__file__).resolve().parents[2]
KCLPY = ROOT / "build" / "kclpy" / KCLPY_VERSION  # holds amazon_kclpy/


def kclpy_path() -> Path:
    """A directory holding `amazon_kclpy`, for sys.path."""
    if (KCLPY / "amazon_kclpy" / "dispatch.py").exists():
        return KCLPY
    KCLPY.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=KCLPY.parent) as scratch:  # renamed in place
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"amazon-kclpy=={KCLPY_VERSION}", "-d", scratch],
            check=True, timeout=300,
        )  # fmt: skip
        (sdist,) = Path(scratch).glob("amazon*kclpy-*.tar.gz")
        top = f"amazon_kclpy-{KCLPY_VERSION}/"
        with tarfile.open(sdist) as archive:
            members = [
                m
                for m in archive.getmembers()
                if m.name.startswith(top + "amazon_kclpy/")
                and (m.isdir() or m.name.endswith(".py"))
            ]
            archive.extractall(scratch, members=members, filter="data")
        try:
            (Path(scratch) / top).rename(KCLPY)
        except OSError:  # another test process got there first
            if not (KCLPY / "amazon_kclpy" / "dispatch.py").exists():
                raise
    return KCLPY
