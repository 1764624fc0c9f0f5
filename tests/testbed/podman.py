"""podman for the test bed: storage, run and temporary directories in our cache, never the
machine's; `cgroupfs` and ulimits this machine allows (no CAP_SYS_RESOURCE here).

Every call runs in a mount namespace of its own where /var/lib is a directory of ours:
podman 4.3 keeps a blob-info cache in /var/lib/containers whatever its configuration
says, and the machine must be left as it was found."""

from __future__ import annotations

import os
import resource
import subprocess
from collections.abc import Sequence
from pathlib import Path

CACHE = Path(
    os.environ.get("STREAMCONSUMER_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamconsumer"
)
ROOT = CACHE / "podman"


def _configure() -> dict[str, str]:
    for name in ("storage", "run", "tmp", "varlib"):
        (ROOT / name).mkdir(parents=True, exist_ok=True)
    storage = ROOT / "storage.conf"
    storage.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{ROOT / "storage"}"\n'
        f'runroot = "{ROOT / "run"}"\n'
    )
    # Above the hard limit, setrlimit needs CAP_SYS_RESOURCE, which this machine lacks.
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    containers = ROOT / "containers.conf"
    containers.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}"]\n'
        f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "none"\n'
        f'tmp_dir = "{ROOT / "tmp"}"\nimage_copy_tmp_dir = "{ROOT / "tmp"}"\n'
    )
    return {
        "CONTAINERS_STORAGE_CONF": str(storage),
        "CONTAINERS_CONF": str(containers),
        "TMPDIR": str(ROOT / "tmp"),
    }


def command(*args: str) -> list[str]:
    """argv that runs `podman ARGS...` with our storage, /var/lib hidden behind our own."""
    return [
        "unshare",
        "--mount",
        "--propagation=private",
        "sh",
        "-c",
        'mount -n --bind "$0" /var/lib && exec podman "$@"',
        str(ROOT / "varlib"),
        *args,
    ]


def environment() -> dict[str, str]:
    return {**os.environ, **_configure()}


def run(
    *args: str, log: Path | None = None, stdin: int | None = None, stdout: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs podman; output goes to `log` (appended) when given. Raises with the log's tail."""
    out = log.open("a") if log else subprocess.PIPE
    try:
        result = subprocess.run(
            command(*args),
            env=environment(),
            stdin=stdin,
            stdout=stdout if stdout is not None else out,
            stderr=out if log else subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        if log and not isinstance(out, int):
            out.close()
    if result.returncode != 0:
        detail = tail(log) if log else (result.stderr or "")[-3000:]
        raise RuntimeError(f"podman {' '.join(args[:2])} failed ({result.returncode}):\n{detail}")
    return result


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def image_exists(reference: str) -> bool:
    result = subprocess.run(
        command("image", "exists", reference), env=environment(), capture_output=True, check=False
    )
    return result.returncode == 0


def image_id(reference: str) -> str:
    return run("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()


def image_size(reference: str) -> int:
    """Bytes of the image's layers, uncompressed (what `podman images` shows)."""
    return int(run("image", "inspect", "--format", "{{.Size}}", reference).stdout.strip())


def pipe_save(references: Sequence[str]) -> subprocess.Popen[bytes]:
    """`podman save` of the images as one docker-archive on the process's stdout (layers
    the images share are in it once)."""
    return subprocess.Popen(
        command("save", "--format=docker-archive", "--multi-image-archive", *references),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
