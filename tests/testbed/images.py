"""Our images, built with podman from the repository's Dockerfiles, with no registry.

The base image is Debian bookworm made here by debootstrap (its python3 is 3.11) and
passed as the Dockerfiles' PYTHON build argument, whose default is the public python
image users have. The quickstart's emulator image starts FROM that base plus this
machine's Node 20 and npm (`node_image`), in place of the node image users have. Each
image is tagged with a digest of what goes into it (Dockerfile, build context, build
arguments, base), so a warm run finds it and builds nothing.

Builds reach PyPI and Maven Central as the host does: the host's trust store is lent to
the download steps as build secrets (`--secret id=ca-bundle` / `id=java-cacerts`), the way
users behind a TLS-inspecting proxy build, and nothing of it stays in an image."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed import podman

REPO = Path(__file__).resolve().parents[2]
PREFIX = "localhost/streamconsumer"
# Bump when the recipe changes in a way the digests below do not see.
RECIPE = "1"
MIRROR = os.environ.get("STREAMCONSUMER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python-is-python3 and python3-pip make it behave like the python image: `python`, `pip`.
BASE_PACKAGES = "python3,python3-pip,python-is-python3,ca-certificates"
# Where distributions keep the trust store (the host's, lent to builds).
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
JAVA_CACERTS = ("/etc/ssl/certs/java/cacerts", "/etc/pki/java/cacerts")
_SKIPPED_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Recipe:
    name: str
    dockerfile: Path
    context: tuple[str, ...]  # what the Dockerfile copies, relative to the build context
    base_arg: str  # the build argument naming the image it starts FROM
    base: str | None = None  # another recipe's name; None: the bookworm base image
    context_dir: Path = REPO
    target: str | None = None  # the Dockerfile's stage to build; None: its last


NODE = "node"  # a recipe's base: node_image, not another recipe
# What the package's Dockerfiles copy (release.dry_run builds them too).
PACKAGE = ("pyproject.toml", "README.md", "requirements/dev.lock", "operator")
_EXAMPLE = ("examples/clickstream",)
# The previous release (tests/releases/README.md): its committed wheel and pins.
RELEASES = REPO / "tests" / "releases"
_RELEASE = ("dev.lock", *sorted(p.name for p in RELEASES.glob("streamconsumer-*.whl")))
RECIPES = (
    Recipe("operator", REPO / "operator/Dockerfile", PACKAGE, "PYTHON"),
    Recipe("worker", REPO / "worker-image/Dockerfile", PACKAGE, "PYTHON"),
    Recipe("worker-spark", REPO / "worker-image/Dockerfile.spark", PACKAGE, "PYTHON"),
    Recipe(
        "clickstream", REPO / "examples/clickstream/Dockerfile", _EXAMPLE, "WORKER_IMAGE", "worker"
    ),
    # The quickstart's in-cluster Kinesis (examples/quickstart), FROM node_image.
    Recipe(
        "kinesis-local",
        REPO / "examples/quickstart/kinesis-local/Dockerfile",
        ("examples/quickstart/kinesis-local",),
        "NODE",
        NODE,
    ),
    Recipe(
        "clickstream-spark",
        REPO / "examples/clickstream/spark/Dockerfile",
        _EXAMPLE,
        "SPARK_WORKER_IMAGE",
        "worker-spark",
    ),
    # Release N-1's images, for the operator upgrade on the real node (docs/upgrades.md).
    Recipe(
        "worker-previous",
        RELEASES / "Dockerfile",
        _RELEASE,
        "PYTHON",
        context_dir=RELEASES,
        target="worker",
    ),
    Recipe(
        "operator-previous",
        RELEASES / "Dockerfile",
        _RELEASE,
        "PYTHON",
        context_dir=RELEASES,
        target="operator",
    ),
    Recipe(
        "clickstream-previous",
        REPO / "examples/clickstream/Dockerfile",
        _EXAMPLE,
        "WORKER_IMAGE",
        "worker-previous",
    ),
)


def _progress(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def _files(root: Path, paths: Iterable[str]) -> Iterable[Path]:
    for relative in paths:
        path = root / relative
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            parts = file.relative_to(root).parts
            skipped = any(p in _SKIPPED_DIRS or p.endswith(".egg-info") for p in parts)
            if file.is_file() and not skipped and file.suffix != ".pyc":
                yield file


def content_tag(*chunks: bytes, root: Path = REPO, paths: Iterable[str] = ()) -> str:
    """A digest of the chunks and of the files (names and bytes) at `paths` in `root`."""
    digest = hashlib.sha256(RECIPE.encode())
    for chunk in chunks:
        digest.update(chunk + b"\0")
    for file in _files(root, paths):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _first(paths: Iterable[str]) -> str | None:
    return next((p for p in paths if Path(p).is_file()), None)


def base_image(log: Path) -> str:
    """Debian bookworm with python3 and pip (debootstrap), imported into podman."""
    reference = f"{PREFIX}/python:bookworm-{content_tag(BASE_PACKAGES.encode(), MIRROR.encode())}"
    if podman.image_exists(reference):
        return reference
    _progress(f"debootstrap bookworm from {MIRROR} (about a minute, once)...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bookworm-", dir=podman.ROOT / "tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}"]
        with log.open("a") as out:
            done = subprocess.run(
                [*argv, "bookworm", str(rootfs), MIRROR], stdout=out, stderr=out, check=False
            )
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{podman.tail(log)}")
        _slim(rootfs)
        with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
            podman.run(
                "import",
                "--change=ENV=LANG=C.UTF-8",
                '--change=CMD=["python3"]',
                "-",
                reference,
                log=log,
                stdin=tar.stdout.fileno() if tar.stdout else None,
            )
    _progress(f"base image {reference} made in {time.monotonic() - started:.0f}s")
    return reference


def node_image(base: str, log: Path) -> str:
    """`base` plus Node and npm as this machine has them (Node 20: `make test` needs it),
    under /usr/local as in the node:20-bookworm-slim image users build FROM (Debian
    bookworm with Node's own build of node and npm): copying them costs seconds, where
    Debian's nodejs is Node 18 and its npm hundreds of packages."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise RuntimeError("the kinesis-local image needs node and npm (Node 20) on PATH")
    binary = Path(node).resolve()
    npm_root = Path(npm).resolve().parents[1]  # <prefix>/lib/node_modules/npm/bin/npm-cli.js
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not version.startswith("v20."):
        raise RuntimeError(
            f"the kinesis-local image wants Node 20 (node:20-bookworm-slim), not {version}"
        )
    tag = content_tag(base.encode(), binary.read_bytes(), (npm_root / "package.json").read_bytes())
    reference = f"{PREFIX}/{NODE}:{version[1:]}-{tag}"
    if podman.image_exists(reference):
        return reference
    with tempfile.TemporaryDirectory(prefix="node-", dir=podman.ROOT / "tmp") as context:
        shutil.copy2(binary, Path(context) / "node")
        shutil.copytree(npm_root, Path(context) / "npm", symlinks=True)
        (Path(context) / "Dockerfile").write_text(
            "ARG BASE\nFROM ${BASE}\n"
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            "COPY node /usr/local/bin/node\n"
            "COPY npm /usr/local/lib/node_modules/npm\n"
            "RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm"
            " && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx"
            " && node --version && npm --version\n"
        )
        podman.run(
            "build",
            "--isolation=chroot",
            f"--build-arg=BASE={base}",
            f"--tag={reference}",
            context,
            log=log,
        )
    _progress(f"base image {reference} made")
    return reference


def _slim(rootfs: Path) -> None:
    """What the python image also leaves out; and pip may install system-wide, as there."""
    for relative in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
    ):
        shutil.rmtree(rootfs / relative, ignore_errors=True)
        (rootfs / relative).mkdir(parents=True, exist_ok=True)
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()


def build_flags() -> list[str]:
    """podman build flags for this machine (release.dry_run builds with them too)."""
    # chroot isolation: no runc, no cgroups, the host's network. The host's UTS namespace
    # and an /etc/hosts entry for it, because the JVM (Spark's jar fetch) must resolve its
    # own hostname.
    hostname = socket.gethostname()
    flags = [
        "--isolation=chroot",
        "--network=host",
        "--uts=host",
        f"--add-host={hostname}:127.0.0.1",
    ]
    if bundle := _first(CA_BUNDLES):
        flags.append(f"--secret=id=ca-bundle,src={bundle}")
    if cacerts := _first(JAVA_CACERTS):
        flags.append(f"--secret=id=java-cacerts,src={cacerts}")
    return flags


def build(recipe: Recipe, base: str, log: Path, step: str) -> str:
    """Builds the recipe FROM `base` unless an image with its content tag exists."""
    dockerfile = recipe.dockerfile.read_bytes()
    arg = f"{recipe.base_arg}={base}"
    chunks = [dockerfile, arg.encode()]
    if recipe.target:
        chunks.append(f"target={recipe.target}".encode())
    tag = content_tag(*chunks, root=recipe.context_dir, paths=recipe.context)
    reference = f"{PREFIX}/{recipe.name}:{tag}"
    if podman.image_exists(reference):
        return reference
    _progress(f"{step} building {recipe.name} from {recipe.dockerfile.relative_to(REPO)}...")
    started = time.monotonic()
    flags = [
        *build_flags(),
        f"--build-arg={arg}",
        *([f"--target={recipe.target}"] if recipe.target else []),
        f"--file={recipe.dockerfile}",
        f"--tag={reference}",
    ]
    try:
        podman.run("build", *flags, str(recipe.context_dir), log=log)
    except RuntimeError as error:
        if UNKNOWN_LAYER not in str(error):
            raise
        # Seen once on a store our builds had pruned: the layer cache's look-up failed on
        # an image whose top layer was gone. Without the cache the build needs no look-up.
        _progress(f"{step} podman's layer cache failed ({UNKNOWN_LAYER}): building without it")
        podman.run("build", "--layers=false", *flags, str(recipe.context_dir), log=log)
    _progress(f"{step} {recipe.name} built in {time.monotonic() - started:.0f}s")
    return reference


UNKNOWN_LAYER = "layer not known"


def pause_image(pause_binary: Path, log: Path) -> str:
    """The pod sandbox image: our pause program FROM scratch."""
    tag = content_tag(pause_binary.read_bytes())
    reference = f"{PREFIX}/pause:{tag}"
    with one_builder():
        if podman.image_exists(reference):
            return reference
        with tempfile.TemporaryDirectory(prefix="pause-", dir=podman.ROOT / "tmp") as context:
            shutil.copy2(pause_binary, Path(context) / "pause")
            (Path(context) / "Dockerfile").write_text(
                'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n'
            )
            podman.run("build", "--isolation=chroot", f"--tag={reference}", context, log=log)
    return reference


@contextlib.contextmanager
def one_builder() -> Iterator[None]:
    """One builder of our images at a time: `make test` builds them while the tests run,
    and a test builds what it needs itself (and prunes what is stale)."""
    podman.ROOT.mkdir(parents=True, exist_ok=True)
    with (podman.ROOT / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_all(log: Path, names: Iterable[str] | None = None) -> dict[str, str]:
    """Builds (or finds) the recipes named, and what they start FROM; name -> reference."""
    with one_builder():
        return _build_all(log, names)


def _build_all(log: Path, names: Iterable[str] | None) -> dict[str, str]:
    wanted = set(names or (r.name for r in RECIPES))
    for recipe in RECIPES:
        if recipe.name in wanted and recipe.base:
            wanted.add(recipe.base)
    todo = [r for r in RECIPES if r.name in wanted]
    refs: dict[str, str] = {"python": base_image(log)}
    if any(recipe.base == NODE for recipe in todo):
        refs[NODE] = node_image(refs["python"], log)
    for index, recipe in enumerate(todo, 1):
        base = refs[recipe.base or "python"]
        refs[recipe.name] = build(recipe, base, log, f"{index}/{len(todo)}")
    _prune(refs)
    return refs


def _prune(current: dict[str, str]) -> None:
    """Drops our images of older content and the build stages' leftovers: without this
    every change to operator/ would leave gigabytes behind (the layer cache goes too;
    an unchanged image is found by its tag, not by the cache)."""
    listed = podman.run("images", "--format={{.Repository}}:{{.Tag}}").stdout.split()
    names = {f"{PREFIX}/{name}" for name in current}
    stale = [
        ref for ref in listed if ref.rsplit(":", 1)[0] in names and ref not in current.values()
    ]
    if stale:
        podman.run("rmi", *stale)
    podman.run("image", "prune", "--force")


def main() -> None:
    """`python -m testbed.images`: build (or find) every image; print their references."""
    log = podman.ROOT / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[images] podman build log: {log}", file=sys.stderr)
    for name, reference in build_all(log).items():
        print(f"{name}\t{reference}")


if __name__ == "__main__":
    main()
