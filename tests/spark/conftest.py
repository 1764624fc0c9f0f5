"""One real Spark per test session and mode: in-process (local[2]) and Spark Connect (a
local Connect server, what SPARK_REMOTE points a worker at). Every Spark test runs on
both unless it asks for one. Delta Lake is configured in both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from streamconsumer.spark.session import DELTA_CONF, spark_session


@pytest.fixture(scope="session", params=["local", "connect"])
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "connect":
            patch.setenv("SPARK_REMOTE", "local[2]")
        else:
            patch.delenv("SPARK_REMOTE", raising=False)
        session = spark_session(DELTA_CONF)
        assert ("connect" in type(session).__module__) == (request.param == "connect")
        yield session
        session.stop()
