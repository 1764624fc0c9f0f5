"""A CycloneDX SBOM of an image's Python environment, made inside the image.

cyclonedx-py (`environment`, from requirements/sbom.lock) reads the installed
distributions of the image's own interpreter: what `pip install` put there, with the
versions, licenses and package URLs their metadata declare, and nothing of the machine
that builds. The tool is installed next to the image (pip --target, by a Python of the
image's version and architecture: 3.11, the runner's) and lent to it read-only, so
nothing of it stays in the image and the SBOM does not list it.

`python -m release.sbom image IMAGE OUT` does it with docker (the release workflow, on the
pushed image); `make release-dry-run` with the test bed's podman (release.dry_run).

`python -m release.sbom dist WHEEL OUT` is the distributions' SBOM: what
`pip install 'streamconsumer[operator,bronze,cli]'` installs at the versions of
requirements/dev.lock (the tests' and the images'), in a throwaway virtualenv without
pip of its own (the wheel alone depends on nothing; its extras are what users install)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "sbom.lock"
TOOLS = ROOT / "build" / "release" / "sbom-tools"
# The distributions' SBOM: every extra but dev and spark (pyspark is an sdist of 450 MB).
DIST_EXTRAS = "operator,bronze,cli"


def install_tools(target: Path = TOOLS, python: str = sys.executable) -> Path:
    """cyclonedx-bom as locked, into `target` (pip --target); again only when the lock changed."""
    stamp = target / ".lock-sha256"
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return target
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(
        [
            *(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *("--no-deps", "--target", str(target), "--requirement", str(LOCK)),
        ],
        check=True,
    )
    stamp.write_text(digest)
    return target


def in_image_script(tools: str, python: str | None = None) -> str:
    """Python that runs cyclonedx-py from `tools` (a path where it runs) over the
    environment of `python` (default: the interpreter running it, the image's); the
    CycloneDX JSON on stdout. The tools are on that interpreter's path only, so the
    environment it reads (a fresh interpreter) does not list them."""
    argv = ["cyclonedx-py", "environment", "--mc-type", "application"]
    argv += ["--output-reproducible", "--output-format", "JSON", "--output-file", "-"]
    target = repr(python) if python else "sys.executable"
    return (
        "import runpy, sys\n"
        f"sys.path.insert(0, {tools!r})\n"
        f"sys.argv = {argv!r} + [{target}]\n"
        "runpy.run_module('cyclonedx_py', run_name='__main__', alter_sys=True)\n"
    )


def for_distribution(wheel: Path, tools: Path) -> str:
    """The SBOM's JSON of `wheel` with DIST_EXTRAS, installed at requirements/dev.lock's
    versions into a virtualenv without pip (by this Python's pip)."""
    with tempfile.TemporaryDirectory(prefix="release-sbom-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "--python", python, "install", "--quiet"),
                *("--disable-pip-version-check", "--only-binary=:all:", "--no-compile"),
                *("--constraint", str(ROOT / "requirements" / "dev.lock")),
                f"{wheel}[{DIST_EXTRAS}]",
            ],
            check=True,
        )
        argv = [sys.executable, "-c", in_image_script(str(tools), python)]
        return _cyclonedx(argv, f"over {wheel.name}")


def with_docker(image: str, tools: Path) -> str:
    """The SBOM's JSON, made in `image` run by docker (no network, the tool mounted)."""
    inside = "/sbom-tools"
    argv = [
        *("docker", "run", "--rm", "--network=none", "--user=0", "--entrypoint=python"),
        *(f"--volume={tools}:{inside}:ro", image, "-c", in_image_script(inside)),
    ]
    return _cyclonedx(argv, f"in {image}")


def _cyclonedx(argv: list[str], where: str) -> str:
    """What `argv`, a run of cyclonedx-py `where`, prints: the SBOM's JSON. Raises
    RuntimeError with its exit code and stderr if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cyclonedx-py {where} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def check(bom: dict[str, Any], version: str) -> list[str]:
    """What is wrong with an SBOM: it must be CycloneDX, list the package at `version`,
    and name every other component with a version and a package URL (the package has
    none when installed from the wheel's file: its reference is that file, with its hash)."""
    found = []
    if bom.get("bomFormat") != "CycloneDX":
        found.append(f"not a CycloneDX document (bomFormat {bom.get('bomFormat')!r})")
    components = bom.get("components") or []
    ours = [c for c in components if c.get("name") == "streamconsumer"]
    if [c.get("version") for c in ours] != [version]:
        found.append(f"streamconsumer {version} is not listed once: {ours}")
    for component in components:
        if component.get("name") == "streamconsumer":
            continue
        if not (component.get("version") and component.get("purl")):
            found.append(f"{component.get('name')} has no version or package URL")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release.sbom", description=__doc__)
    parser.add_argument("kind", choices=["image", "dist"], help="of an image, or of the wheel")
    parser.add_argument("subject", help="an image docker can run (by digest), or the wheel")
    parser.add_argument("output", type=Path, help="where the CycloneDX JSON goes")
    parser.add_argument("--version", required=True, help="the streamconsumer it must list")
    args = parser.parse_args(argv)
    tools = install_tools()
    if args.kind == "image":
        text = with_docker(args.subject, tools)
    else:
        text = for_distribution(Path(args.subject), tools)
    found = check(json.loads(text), args.version)
    for problem in found:
        print(f"release.sbom: {args.subject}: {problem}", file=sys.stderr)
    if found:
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"{args.output}: {len(json.loads(text).get('components') or [])} components")
    return 0


if __name__ == "__main__":
    sys.exit(main())
