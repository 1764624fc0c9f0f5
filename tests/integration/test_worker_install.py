"""The worker extras are slim: `streamconsumer[worker]` (what the worker image installs)
brings neither kopf nor the Kubernetes client, and `streamconsumer[bronze]` (bronze
landing workers) adds pyarrow but no pyspark: the workers import and run without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = "import streamconsumer.worker.__main__, streamconsumer.worker.runtime"


@pytest.mark.parametrize(
    ("extra", "present", "absent", "probe"),
    [
        ("worker", {"boto3", "httpx", "pydantic", "orjson"}, {"kopf", "kubernetes"}, WORKER),
        (
            "bronze",
            {"boto3", "pyarrow", "orjson"},
            {"kopf", "kubernetes", "pyspark"},
            f"{WORKER}; from streamconsumer.spark import BronzeProcessor",
        ),
    ],
)
def test_worker_install_is_slim(
    tmp_path: Path, extra: str, present: set[str], absent: set[str], probe: str
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    # --no-compile: the probe imports a few modules; compiling every installed one was a
    # ninth of this file's CPU (74 -> 66 CPU-s) and is no part of what is checked.
    lock = str(REPO / "requirements/dev.lock")
    subprocess.run(
        [*pip, "install", "--quiet", "--no-compile", "-c", lock, f"{REPO}[{extra}]"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    installed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in installed.stdout.splitlines()}
    assert present <= names
    assert not absent & names
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True
    )
    assert imported.returncode == 0, imported.stderr
