"""The real Delta jar fetch (`python -m streamconsumer.spark.jars DIR`, what the Spark
worker image and the first session on a machine run): from Maven Central, as on a fresh
machine whose ~/.m2 holds a module's POM without its jar, as Maven leaves dependencies it
only read (here the DynamoDB Local install left org.slf4j:slf4j-api:2.0.13 so); and from
a repository that cannot be reached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamconsumer.spark.jars import DELTA_PACKAGE
from testbed.processes import free_port

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

POM_ONLY = ("org.slf4j", "slf4j-api", "2.0.13")  # a dependency of Delta's


def _pom_only_m2(home: Path) -> None:
    group, artifact, version = POM_ONLY
    module = home / ".m2" / "repository" / Path(*group.split(".")) / artifact / version
    module.mkdir(parents=True)
    (module / f"{artifact}-{version}.pom").write_text(
        "<project><modelVersion>4.0.0</modelVersion>"
        f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version></project>\n"
    )


def _fetch(directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamconsumer.spark.jars", str(directory)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_jar_fetch_ignores_a_pom_without_its_jar_in_the_local_maven_repository(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    _pom_only_m2(home)
    java_options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        # The JVM takes its home from the password database, not from HOME.
        "JAVA_TOOL_OPTIONS": f"{java_options} -Duser.home={home}".strip(),
    }
    jars = tmp_path / "jars"
    fetched = _fetch(jars, env)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    _, artifact, version = DELTA_PACKAGE.split(":")
    assert (jars / f"io.delta_{artifact}-{version}.jar").is_file(), sorted(jars.iterdir())


def test_a_failed_fetch_ends_with_ivys_report_and_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    nothing_listens = f"http://127.0.0.1:{free_port()}/maven2/"
    fetched = _fetch(
        tmp_path / "jars", {**os.environ, "DEFAULT_ARTIFACT_REPOSITORY": nothing_listens}
    )
    assert fetched.returncode != 0, "the fetch did not use DEFAULT_ARTIFACT_REPOSITORY"
    assert "UNRESOLVED DEPENDENCIES" in fetched.stderr, fetched.stderr[-3000:]
    assert "Traceback" not in fetched.stderr, fetched.stderr[-3000:]
    last = fetched.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fetching {DELTA_PACKAGE} failed"), last
