"""One real Spark per test session and mode: in-process (local[2]) and Spark Connect (a
local Connect server, what SPARK_REMOTE points a worker at). Every Spark test runs on
both unless it asks for one. Delta Lake is configured in both, from a jars directory
fetched once per machine the way the Spark worker image fetches it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streamconsumer.spark.session import JARS_DIR_ENV, delta_conf, spark_session


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
