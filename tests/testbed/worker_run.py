"""A worker process run to its exit, configured by its environment alone, as in its pod."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamconsumer.worker.config import WorkerConfig


def run_worker(config: WorkerConfig, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    """Runs `python -m streamconsumer.worker` with `config`'s environment and `pythonpath`
    (where its processor is) until it exits, a minute at most; its output captured."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(pythonpath), **config.to_env()}
    return subprocess.run(
        [sys.executable, "-m", "streamconsumer.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
