"""One real Spark per test session and mode: in-process (local[2]) and Spark Connect (a
local Connect server, what SPARK_REMOTE points a worker at). Every Spark test runs on
both unless it asks for one. Delta Lake is configured in both, from a jars directory
fetched once per machine the way the Spark worker image fetches it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streamconsumer.spark import jars
from streamconsumer.spark.session import DELTA_PACKAGE, JARS_DIR_ENV, delta_conf, spark_session

JARS_CACHE = Path.home() / ".cache" / "streamconsumer" / "spark-jars"


@pytest.fixture(scope="session")
def delta_jars() -> Path:
    # Keyed by what fetch() does too, so a change to it fetches again.
    recipe = hashlib.sha256(Path(jars.__file__).read_bytes()).hexdigest()[:12]
    directory = JARS_CACHE / f"{DELTA_PACKAGE.replace(':', '_')}-{recipe}"
    if not directory.is_dir():
        partial = directory.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        fetched = subprocess.run(
            [sys.executable, "-m", "streamconsumer.spark.jars", str(partial)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert fetched.returncode == 0, fetched.stderr[-3000:]
        partial.rename(directory)  # only a complete fetch is ever used
    return directory


@pytest.fixture(scope="session", params=["local", "connect"])
def spark(request: pytest.FixtureRequest, delta_jars: Path) -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(JARS_DIR_ENV, str(delta_jars))
        if request.param == "connect":
            patch.setenv("SPARK_REMOTE", "local[2]")
        else:
            patch.delenv("SPARK_REMOTE", raising=False)
        session = spark_session(delta_conf())
        assert ("connect" in type(session).__module__) == (request.param == "connect")
        yield session
        session.stop()
