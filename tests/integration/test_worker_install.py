"""The worker extra is slim: installing `streamconsumer[worker]` (what the worker image
does) brings neither kopf nor the Kubernetes client, and the worker imports without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_worker_install_has_no_kopf_and_no_kubernetes(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run(
        [*pip, "install", "--quiet", f"{REPO}[worker]"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    installed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in installed.stdout.splitlines()}
    assert {"boto3", "httpx", "pydantic"} <= names
    assert not {"kopf", "kubernetes"} & names
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import streamconsumer.worker.__main__, streamconsumer.worker.runtime",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
