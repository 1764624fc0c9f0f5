"""The previous release, committed under tests/releases/ (made by tests/releases/make.sh):
its wheel unpacked where a process's PYTHONPATH can put it first, its CRD, and how a
test tells which release a process really ran."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.controlplane import ControlPlane
from testbed.launch import LAUNCH_NOTE

RELEASES = Path(__file__).resolve().parents[1] / "releases"
PREVIOUS_CRD = RELEASES / "crd.yaml"
PREVIOUS_CHART = RELEASES / "chart.tgz"
CURRENT_CRD = RELEASES.parents[1] / "crds" / "streamconsumer.yaml"


def checksums() -> dict[str, str]:
    """File name -> sha256, as SHA256SUMS records them."""
    lines = (RELEASES / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split() for line in lines if line.strip())}


def verified(path: Path) -> Path:
    """`path`, after checking its bytes against SHA256SUMS (a stale or edited artifact
    fails here, not as a puzzling upgrade failure)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert checksums()[path.name] == digest, f"{path} does not match tests/releases/SHA256SUMS"
    return path


def previous_wheel() -> Path:
    wheels = sorted(RELEASES.glob("streamconsumer-*.whl"))
    assert len(wheels) == 1, f"one wheel expected in {RELEASES}, found {wheels}"
    return verified(wheels[0])


def previous_commit() -> str:
    return verified(RELEASES / "COMMIT").read_text().strip()


def unpack_previous(into: Path) -> Path:
    """The previous release's package, installed as pip installs a pure-Python wheel (its
    files unpacked into a directory); put the directory first on PYTHONPATH to run it.
    Its dependencies are this environment's (the same pins: tests/releases/dev.lock)."""
    with zipfile.ZipFile(previous_wheel()) as wheel:
        wheel.extractall(into)
    return into


def previous_loads(status: Mapping[str, Any], into: Path) -> subprocess.CompletedProcess[str]:
    """The previous release's own `durable_from_status` (what its `load` reads a
    consumer's table with) run on `status`, its package unpacked into `into`. Its module
    path is the previous release's, from before the controller's subpackages."""
    script = (
        "import json, sys\n"
        "from streamconsumer.controller.lease_coordinator import durable_from_status\n"
        "print(durable_from_status(json.loads(sys.stdin.read())))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(status),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(unpack_previous(into))},
        check=False,
    )


def launched_from(log: Path) -> list[str]:
    """The streamconsumer packages the processes logging to `log` ran (testbed.launch's
    note, one per start), as "VERSION from DIRECTORY"."""
    prefix = LAUNCH_NOTE.split("{", 1)[0]
    return [line[len(prefix) :] for line in log.read_text().splitlines() if line.startswith(prefix)]


def apply_crd(plane: ControlPlane, path: Path, timeout: float = 60.0) -> None:
    """Applies a CRD as the chart would (server-side, taking over its fields) and waits
    until it is Established and its objects can be listed."""
    applied = plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    deadline = time.monotonic() + timeout
    established = '{.status.conditions[?(@.type=="Established")].status}'
    while plane.kubectl("get", "-f", str(path), "-o", f"jsonpath={established}").stdout != "True":
        assert time.monotonic() < deadline, f"{path.name} never became Established"
        time.sleep(0.2)
    while plane.kubectl("get", "streamconsumers", "-A").returncode != 0:
        assert time.monotonic() < deadline, "StreamConsumer storage never became ready"
        time.sleep(0.2)


def _digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def previous_sources() -> dict[str, str]:
    """The previous release's Python files (`streamconsumer/...`) -> sha256, from its wheel."""
    with zipfile.ZipFile(previous_wheel()) as wheel:
        names = [
            n for n in wheel.namelist() if n.startswith("streamconsumer/") and n.endswith(".py")
        ]
        return _digests({name: wheel.read(name) for name in names})


def current_sources() -> dict[str, str]:
    """This checkout's Python files (`streamconsumer/...`) -> sha256."""
    package = RELEASES.parents[1] / "operator"
    files = sorted((package / "streamconsumer").rglob("*.py"))
    return _digests({str(f.relative_to(package)): f.read_bytes() for f in files})


def installed_release(root: Path) -> str:
    """Which release's package a filesystem holds, installed as pip installs it on Debian
    (root: a container's, e.g. /proc/PID/root): "previous", "current", or what differs."""
    found = sorted(root.glob("usr/local/lib/python3*/dist-packages/streamconsumer"))
    assert len(found) == 1, f"one streamconsumer package expected under {root}, found {found}"
    site = found[0].parent
    installed = _digests(
        {str(f.relative_to(site)): f.read_bytes() for f in sorted(found[0].rglob("*.py"))}
    )
    for name, sources in (("previous", previous_sources()), ("current", current_sources())):
        if installed == sources:
            return name
    previous = previous_sources()
    differing = sorted(
        n for n in installed.keys() | previous.keys() if installed.get(n) != previous.get(n)
    )
    return f"neither release (differs from the previous in {differing[:5]})"
