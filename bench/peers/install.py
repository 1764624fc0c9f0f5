"""Installs what `make bench-peers` needs into build/peers/ (gitignored), once:

- amazon-kclpy 3.1.3 from PyPI (its sdist), and the jars its pom.xml lists (KCL multilang
  3.1.3 and AWS SDK v2, exactly those, no transitive ones: as kclpy's own setup.py fetches
  them) from Maven Central with mvn; kclpy is then pip-installed into build/peers/kclpy;
- DynamoDB Local from Maven Central (with its sqlite4java native library);
- our HTTP/1.1 stand-in for KCL's KinesisClientUtil, compiled with the local JDK.

Each step leaves a marker when it is complete, so a second run does nothing.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUILD = ROOT / "build" / "peers"
M2 = BUILD / "m2"
KCLPY_VERSION = "3.1.3"
KCLPY = BUILD / "kclpy"  # a pip --target directory: amazon_kclpy, its jars beside it
KCL_JARS = KCLPY / "amazon_kclpy" / "jars"
DYNAMODB_LOCAL = BUILD / "dynamodb-local"
H1_CLASSES = BUILD / "h1-classes"
MARK = ".complete"


def done(directory: Path) -> bool:
    return (directory / MARK).exists()


def mark(directory: Path) -> None:
    (directory / MARK).write_text("")


def installs(directory: Path, title: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Makes a function that fills `directory` an install step: skipped once the
    directory is marked complete, otherwise started afresh, then marked."""

    def step(fill: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(fill)
        def install() -> None:
            if done(directory):
                return
            print(f"==> {title}")
            shutil.rmtree(directory, ignore_errors=True)
            fill()
            mark(directory)

        return install

    return step


def run(argv: Sequence[str], quiet: bool = False) -> None:
    """Runs a step; a quiet one shows its output only if it fails."""
    if not quiet:
        subprocess.run(list(argv), check=True)
        return
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"failed: {' '.join(argv)}")


def mvn_copy(pom: Path, into: Path, transitive: bool) -> None:
    """mvn dependency:copy-dependencies, with a one-line progress note per download."""
    into.mkdir(parents=True, exist_ok=True)
    argv = [
        "mvn",
        "-B",
        "-f",
        str(pom),
        f"-Dmaven.repo.local={M2}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={into}",
        f"-DexcludeTransitive={'false' if transitive else 'true'}",
    ]
    downloads = 0
    log: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as mvn:
        assert mvn.stdout is not None
        for line in mvn.stdout:
            log.append(line)
            if "Downloaded from" in line and ".jar" in line:
                downloads += 1
                # "Downloaded from central: https://.../name.jar (12 kB at 3.4 MB/s)"
                url = next((word for word in line.split() if "://" in word), line)
                name = url.rsplit("/", 1)[-1]
                print(f"    [{downloads:3d}] {name}", flush=True)
    if mvn.returncode != 0:
        sys.stderr.write("".join(log[-40:]))
        raise SystemExit(f"mvn failed for {pom}")


@installs(
    KCLPY, f"amazon-kclpy {KCLPY_VERSION} (PyPI) and the jars its pom.xml lists (Maven Central)"
)
def kclpy() -> None:
    downloads = BUILD / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    sdist = downloads / f"amazon_kclpy-{KCLPY_VERSION}.tar.gz"
    if not sdist.exists():
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary=:all:",
                "--progress-bar=on",
                "-d",
                str(downloads),
                f"amazon-kclpy=={KCLPY_VERSION}",
            ]
        )
    source = BUILD / "src"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(source, filter="data")
    package = source / f"amazon_kclpy-{KCLPY_VERSION}"
    # kclpy's pom.xml lists every jar but has no coordinates of its own, which mvn needs.
    pom = package / "pom.xml"
    text = pom.read_text()
    coordinates = (
        "<groupId>local.streamconsumer.bench</groupId><artifactId>kclpy-jars</artifactId>"
        f"<version>{KCLPY_VERSION}</version>"
    )
    pom.write_text(text.replace("</modelVersion>", "</modelVersion>" + coordinates, 1))
    # Into the package's own jars/ directory: kclpy's setup.py then finds every jar it
    # lists present and downloads nothing itself.
    mvn_copy(pom, package / "amazon_kclpy" / "jars", transitive=False)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(KCLPY),
            str(package),
        ],
        quiet=True,  # setuptools' deprecation warnings about kclpy's setup.cfg
    )
    jars = sorted(KCL_JARS.glob("*.jar"))
    if not any(j.name.startswith("amazon-kinesis-client-multilang-") for j in jars):
        raise SystemExit(f"no KCL multilang jar in {KCL_JARS}")
    shutil.rmtree(source)
    print(f"    {len(jars)} jars in {KCL_JARS.relative_to(ROOT)}")


@installs(DYNAMODB_LOCAL, "DynamoDB Local (Maven Central)")
def dynamodb_local() -> None:
    mvn_copy(HERE / "dynamodb-local.pom.xml", DYNAMODB_LOCAL, transitive=True)
    if not list(DYNAMODB_LOCAL.glob("libsqlite4java-linux-amd64-*.so")):
        raise SystemExit("DynamoDB Local came without its sqlite4java native library")


@installs(H1_CLASSES, "the HTTP/1.1 KinesisClientUtil stand-in (javac)")
def h1_classes() -> None:
    H1_CLASSES.mkdir(parents=True)
    sources = [str(p) for p in (HERE / "java").rglob("*.java")]
    run(["javac", "-d", str(H1_CLASSES), "-cp", f"{KCL_JARS}/*", "--release", "17", *sources])


def main() -> None:
    for tool in ("mvn", "javac", "java", "unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench-peers needs {tool} on PATH")
    kclpy()
    dynamodb_local()
    h1_classes()


if __name__ == "__main__":
    main()
