"""`make release-dry-run`: every step of .github/workflows/release.yml that can run on
this machine, on this checkout, pushing and signing nothing (CONTRIBUTING.md, "Releasing").

1. version: the tag (RELEASE_TAG, default v + the version) names streamconsumer.__version__
   and the chart agrees (`python -m release.version --tag`, the workflow's first step);
2. dist: `make dist` (wheel and sdist, twine check --strict);
3. chart: `helm lint` and `helm package` (helm from tests/helm/build.sh);
4. arm64: every dependency of the images' extras, at the versions of requirements/dev.lock,
   has a wheel for CPython 3.11 on manylinux aarch64 or is pure Python (pip download
   --only-binary=:all:); this machine cannot run arm64 builds (no binfmt emulation), and
   a missing wheel is what breaks a multi-arch Python image in practice;
5. images: the operator and worker images for amd64 with podman, FROM the test bed's
   debootstrapped bookworm (Docker Hub is out of reach: testbed.images), with the build
   arguments the workflow passes, and their OCI labels read back;
6. sbom: a CycloneDX SBOM of each image's Python environment, made inside it, and of the
   distributions with their extras (release.sbom);
7. actionlint (with shellcheck) on .github/workflows.

Everything it writes goes to build/release/. It prints a summary and exits 1 when a step
failed. Run it with `make release-dry-run` (PYTHONPATH=tests, for the test bed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from release import sbom, version
from testbed import images, podman

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "release"
PREFIX = "localhost/streamconsumer-release"
# The images the workflow builds and pushes (its `images` job's matrix).
IMAGES = {"operator": "operator/Dockerfile", "worker": "worker-image/Dockerfile"}
# The extras those images install (worker-image/Dockerfile's EXTRAS: worker or bronze).
EXTRAS = "operator,bronze"
LABELS = ("title", "description", "licenses", "version", "revision", "source")
# CPython 3.11 on Debian bookworm's glibc (2.36) on arm64: the wheels pip would take there.
AARCH64 = ["manylinux2014_aarch64"] + [f"manylinux_2_{m}_aarch64" for m in range(17, 37)]


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Run:
    version: str
    tag: str
    revision: str
    source: str
    steps: list[Step] = field(default_factory=list)
    dist_wheel: Path | None = None
    image_refs: dict[str, str] = field(default_factory=dict)

    def step(self, name: str, action: Callable[[], str]) -> None:
        print(f"==> {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        step = Step(name)
        try:
            step.detail = action()
            step.ok = True
        except Exception as error:  # every failure is reported, then the next step runs
            step.detail = f"{type(error).__name__}: {error}"
        step.seconds = time.monotonic() - started
        self.steps.append(step)


def _run(argv: list[str]) -> str:
    """Runs argv in the repository; raises with the end of its output when it fails."""
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"{' '.join(argv[:4])} exited {done.returncode}:\n{tail}")
    return str(done.stdout)


def _git(*args: str) -> str:
    return _run(["git", *args]).strip()


def check_version(run: Run) -> str:
    _run([sys.executable, "-m", "release.version", "--tag", run.tag])
    charts = version.chart_versions()
    return (
        f"tag {run.tag} = streamconsumer.__version__ {run.version} = chart "
        f"{charts['version']} (appVersion {charts['appVersion']})"
    )


def build_dist(run: Run) -> str:
    _run(["make", "dist"])
    files = sorted((ROOT / "dist").iterdir())
    wheels = [f for f in files if f.name == f"streamconsumer-{run.version}-py3-none-any.whl"]
    if len(wheels) != 1 or not (ROOT / "dist" / f"streamconsumer-{run.version}.tar.gz").is_file():
        raise RuntimeError(f"expected the wheel and sdist of {run.version}, dist/ has {files}")
    run.dist_wheel = wheels[0]
    sizes = ", ".join(f"{f.name} ({f.stat().st_size // 1024} KB)" for f in files)
    return f"{sizes}; twine check --strict passed"


def package_chart(run: Run) -> str:
    helm = _run(["tests/helm/build.sh"]).strip()
    _run([helm, "lint", "charts/streamconsumer"])
    destination = OUT / "chart"
    destination.mkdir(parents=True, exist_ok=True)
    for old in destination.glob("*.tgz"):
        old.unlink()
    _run([helm, "package", "charts/streamconsumer", "--destination", str(destination)])
    (package,) = destination.glob("*.tgz")
    if package.name != f"streamconsumer-{run.version}.tgz":
        raise RuntimeError(
            f"helm package made {package.name}, not streamconsumer-{run.version}.tgz"
        )
    return f"helm lint passed; {package.relative_to(ROOT)} ({package.stat().st_size // 1024} KB)"


def check_arm64_wheels(run: Run) -> str:
    if run.dist_wheel is None:
        raise RuntimeError("needs the wheel of the dist step")
    platforms = [f"--platform={p}" for p in AARCH64]
    with tempfile.TemporaryDirectory(prefix="release-arm64-") as tmp:
        _run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet"),
                *("--disable-pip-version-check", "--only-binary=:all:"),
                *("--python-version=3.11", "--implementation=cp", "--abi=cp311", *platforms),
                *("--constraint=requirements/dev.lock", f"--dest={tmp}"),
                f"{run.dist_wheel}[{EXTRAS}]",
            ]
        )
        wheels = sorted(p.name for p in Path(tmp).glob("*.whl"))
        others = sorted(p.name for p in Path(tmp).iterdir() if p.suffix != ".whl")
    if others:
        raise RuntimeError(f"not wheels: {others}")
    native = [w for w in wheels if not w.endswith("-none-any.whl")]
    if any("aarch64" not in w for w in native):
        raise RuntimeError(f"a native wheel not for aarch64: {native}")
    names = ", ".join(w.split("-")[0] for w in native)
    return (
        f"[{EXTRAS}] on cp311 manylinux aarch64: {len(wheels)} wheels, "
        f"{len(native)} native ({names}), the rest pure Python"
    )


def _labels_expected(run: Run) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        "licenses": str(project["license"]),
        "version": run.version,
        "revision": run.revision,
        "source": run.source,
    }


def build_images(run: Run) -> str:
    log = OUT / "podman-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    base = images.base_image(log)
    expected = _labels_expected(run)
    args = {"VERSION": run.version, "REVISION": run.revision, "SOURCE": run.source}
    lines = []
    for name, dockerfile in IMAGES.items():
        build_args = [f"--build-arg=PYTHON={base}"] + [
            f"--build-arg={k}={v}" for k, v in args.items()
        ]
        tag = images.content_tag(
            (ROOT / dockerfile).read_bytes(),
            *(a.encode() for a in build_args),
            paths=images.PACKAGE,
        )
        reference = f"{PREFIX}/{name}:{tag}"
        started = time.monotonic()
        built = "found"
        if not podman.image_exists(reference):
            podman.run(
                "build",
                *images.build_flags(),
                *build_args,
                f"--file={ROOT / dockerfile}",
                f"--tag={reference}",
                str(ROOT),
                log=log,
            )
            built = f"built in {time.monotonic() - started:.0f}s"
        inspected = json.loads(podman.run("image", "inspect", reference).stdout)[0]
        labels = inspected.get("Labels") or inspected.get("Config", {}).get("Labels") or {}
        oci = {k: labels.get(f"org.opencontainers.image.{k}", "") for k in LABELS}
        wrong = {k: v for k, v in oci.items() if not v or (k in expected and v != expected[k])}
        if wrong:
            raise RuntimeError(f"{name}: labels {wrong}, expected {expected} and all set")
        architecture = inspected.get("Architecture")
        if architecture != "amd64":
            raise RuntimeError(f"{name} is for {architecture}, not amd64")
        run.image_refs[name] = reference
        lines.append(f"{name} {reference} ({built}, amd64; title {oci['title']!r})")
    _prune(set(run.image_refs.values()))
    labels = ", ".join(f"{k}={v}" for k, v in expected.items())
    return "; ".join(lines) + f"; OCI labels set: {labels}"


def _prune(current: set[str]) -> None:
    """Drops the dry run's images of older commits: the test bed's pruning keeps to its own."""
    listed = podman.run("images", "--format={{.Repository}}:{{.Tag}}").stdout.split()
    stale = [ref for ref in listed if ref.startswith(f"{PREFIX}/") and ref not in current]
    if stale:
        podman.run("rmi", *stale)


def _sbom_in_testbed_image(reference: str, tools: Path) -> str:
    """release.sbom's in-image script, run by chroot in the image mounted by podman: the
    test bed's podman cannot run containers on this machine (runc may not set the
    rlimits), and the image's root is all the script needs."""
    script = (
        'set -eu\nmount -n --bind "$0" /var/lib\nroot=$(podman image mount "$1")\n'
        'mount -n --bind "$2" "$root/tmp"\nexec chroot "$root" python -c "$3"\n'
    )
    done = subprocess.run(
        [
            *("unshare", "--mount", "--propagation=private", "sh", "-c", script),
            *(str(podman.ROOT / "varlib"), reference, str(tools), sbom.in_image_script("/tmp")),
        ],
        env=podman.environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"cyclonedx-py in {reference} failed ({done.returncode}):\n{done.stderr}"
        )
    return done.stdout


def make_sboms(run: Run) -> str:
    if set(run.image_refs) != set(IMAGES) or run.dist_wheel is None:
        raise RuntimeError("needs the images of the images step and the wheel of dist")
    tools = sbom.install_tools()
    wheel = run.dist_wheel
    lines = []
    subjects: list[tuple[str, str | Path]] = [("streamconsumer", wheel)]
    subjects += list(run.image_refs.items())
    for name, subject in subjects:
        if isinstance(subject, Path):
            text = sbom.for_distribution(subject, tools)
        else:
            text = _sbom_in_testbed_image(subject, tools)
        bom = json.loads(text)
        problems = sbom.check(bom, run.version)
        if problems:
            raise RuntimeError(f"{name}: {problems}")
        path = OUT / "sbom" / f"{name}.cdx.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        lines.append(
            f"{path.relative_to(ROOT)} (CycloneDX {bom['specVersion']}, "
            f"{len(bom['components'])} components)"
        )
    return "; ".join(lines)


def lint_workflows(run: Run) -> str:
    actionlint = _run(["tests/actionlint/build.sh"]).strip()
    workflows = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github/workflows").glob("*.yml"))
    _run([actionlint, "-no-color", *workflows])
    checked = _run([actionlint, "-version"]).splitlines()[0]
    return f"actionlint {checked} with shellcheck: {', '.join(workflows)} clean"


def main() -> int:
    started = time.monotonic()
    package_version = version.package_version()
    revision = _git("rev-parse", "HEAD")
    origin = subprocess.run(
        ["git", "remote", "get-url", "origin"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    run = Run(
        version=package_version,
        tag=os.environ.get("RELEASE_TAG") or f"v{package_version}",
        revision=revision,
        # The workflow passes ${{ github.server_url }}/${{ github.repository }}.
        source=os.environ.get("RELEASE_SOURCE") or origin or f"file://{ROOT}",
    )
    run.step("version", lambda: check_version(run))
    run.step("dist", lambda: build_dist(run))
    run.step("chart", lambda: package_chart(run))
    run.step("arm64 wheels", lambda: check_arm64_wheels(run))
    run.step("images (amd64)", lambda: build_images(run))
    run.step("sbom", lambda: make_sboms(run))
    run.step("actionlint", lambda: lint_workflows(run))

    dirty = " (uncommitted changes: the images hold them, the revision label does not)"
    print(
        f"\nrelease dry run: streamconsumer {run.version}, tag {run.tag}, commit {revision[:12]}"
        + (dirty if _git("status", "--porcelain") else "")
    )
    for step in run.steps:
        status = "ok" if step.ok else "FAILED"
        print(f"  {status:<6} {step.name:<15} {step.seconds:6.1f}s  {step.detail}")
    print(
        "  not run here (the workflow only): the arm64 image builds (no binfmt emulation on\n"
        "  this machine), pushes to ghcr.io, cosign signing, helm push, PyPI trusted publishing\n"
        f"  made: {OUT.relative_to(ROOT)}/ (chart, sbom, podman-build.log), dist/"
    )
    failed = [s.name for s in run.steps if not s.ok]
    verdict = f"FAILED: {', '.join(failed)}" if failed else "passed"
    print(f"release dry run {verdict} in {time.monotonic() - started:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
