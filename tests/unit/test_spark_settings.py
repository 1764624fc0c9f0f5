"""Spark settings and Delta's commit races, without a JVM: a thin worker (Spark Connect, no
Java) builds every sink; deploy-time settings parse as spark-defaults.conf lines, and a bad
one is named; a job spark-submit launched keeps spark-submit's master; a commit that lost
a race runs again and nothing else does."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streamconsumer.spark import (
    DeltaChangesSink,
    DeltaMergeSink,
    DeltaSink,
    Sink,
    SparkBatchProcessor,
)
from streamconsumer.spark import jars as delta_jars
from streamconsumer.spark import session as sessions
from streamconsumer.spark.delta_tables import (
    MAX_DELAY_SECONDS,
    WARN_EVERY,
    is_conflict,
    until_committed,
)
from streamconsumer.spark.session import CONF_ENV, MAX_CONF_LINES, deployed_conf


def test_thin_workers_build_every_sink_without_java_or_jars(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_fetch() -> Path:
        raise AssertionError("a Spark Connect client fetched Delta's jars")

    monkeypatch.setattr(delta_jars, "cached", no_fetch)
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark-connect.data:15002")
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("STREAMCONSUMER_SPARK_JARS", raising=False)
    sinks: list[Sink] = [DeltaSink("/t"), DeltaMergeSink("/t"), DeltaChangesSink("/t")]
    for sink in sinks:
        SparkBatchProcessor(lambda df, batch: df, sink, "stream")


def test_deploy_time_settings_read_as_spark_defaults_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        CONF_ENV,
        "# shares the cluster\n"
        "spark.cores.max 2\n"
        "  spark.executor.memory=1g\n"
        "spark.driver.extraJavaOptions  -Da=b -Dc=d\n"
        "spark.sql.shuffle.partitions=8 \r\n\n"
        "spark.driver.memory = 2g\n"
        "spark.sql.session.timeZone:UTC\n",
    )
    assert deployed_conf() == {
        "spark.cores.max": "2",
        "spark.executor.memory": "1g",
        "spark.driver.extraJavaOptions": "-Da=b -Dc=d",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
    }


@pytest.mark.parametrize(
    "line", ["cores.max 2", "spark.cores.max", "spark.x=", "spark. x", "spark.=1", "spark.a.=1"]
)
def test_a_bad_setting_is_named_by_its_line(monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    monkeypatch.setenv(CONF_ENV, f"spark.ok 1\n# a comment\n\n{line}\n")
    with pytest.raises(ValueError, match=rf"{CONF_ENV}, line 4 \({re.escape(repr(line))}\)"):
        deployed_conf()


def test_a_setting_that_is_not_utf8_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONF_ENV, "spark.a \udcff")  # how os.environ holds a stray byte
    with pytest.raises(ValueError, match=f"{CONF_ENV}, line 1"):
        deployed_conf()


def test_settings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONF_ENV, "\n".join(f"spark.x{n} 1" for n in range(MAX_CONF_LINES + 1)))
    with pytest.raises(ValueError, match=f"at most {MAX_CONF_LINES}"):
        deployed_conf()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What spark_session() asks the builder for (no JVM: getOrCreate gives the options).
    `submitted` is what spark-submit gave the process, when the test says it launched it."""
    for name in ("SPARK_REMOTE", "SPARK_MASTER", CONF_ENV, "SPARK_SHUFFLE_PARTITIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    submitted: dict[str, str] = {}
    monkeypatch.setattr(sessions, "submitted_conf", lambda: dict(submitted))

    def options(builder: Any) -> dict[str, str]:
        return dict(builder._options)

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", options)
    return submitted


def session_options(needs: dict[str, str] | None = None) -> dict[str, str]:
    return sessions.spark_session(needs)  # type: ignore[return-value]  # (the `built` fixture)


def test_a_job_spark_submit_launched_keeps_its_master_and_settings(
    built: dict[str, str],
) -> None:
    """`spark-submit --master spark://… --conf spark.cores.max=6 job.py`: the job runs
    where spark-submit sent it, with the cores it was given; our defaults fill the rest."""
    built |= {
        "spark.master": "spark://spark-master:7077",
        "spark.cores.max": "6",
        "spark.sql.shuffle.partitions": "12",
    }
    # As SparkContext makes it: spark-submit's JVM's settings, then the builder's.
    effective = built | session_options({"spark.sql.extensions": "delta"})
    assert effective["spark.master"] == "spark://spark-master:7077"
    assert effective["spark.cores.max"] == "6"
    assert effective["spark.sql.shuffle.partitions"] == "12"
    assert effective["spark.driver.memory"] == "1g"  # a default spark-submit left alone
    assert effective["spark.sql.extensions"] == "delta"


def test_spark_submit_defaults_to_its_own_master_only_where_none_is_named(
    built: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert session_options()["spark.master"] == "local[2]"  # not under spark-submit
    built["spark.master"] = "local[*]"  # spark-submit without --master
    assert session_options()["spark.master"] == "local[*]"
    monkeypatch.setenv(CONF_ENV, "spark.master spark://from-settings:7077")
    assert session_options()["spark.master"] == "spark://from-settings:7077"
    monkeypatch.setenv("SPARK_MASTER", "spark://from-env:7077")
    options = session_options()
    assert options["spark.master"] == "spark://from-env:7077"
    assert options["spark.cores.max"] == "2"  # a standalone cluster's share, by default


def test_a_process_that_starts_its_own_jvm_was_given_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert sessions.submitted_conf() == {}


# As Delta 4.4 words them, through Spark Connect and through py4j.
CONFLICTS = [
    "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] ConcurrentAppendException: Files were added to "
    "the root of the table by a concurrent update. Please try the operation again.",
    "io.delta.exceptions.ConcurrentDeleteReadException: This transaction attempted to read "
    "one or more files that were deleted",
    "An error occurred while calling o91.save.\n: io.delta.exceptions.ConcurrentAppend"
    "Exception: [DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Files were added",
    "[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: The protocol version of the Delta "
    "table has been changed by a concurrent update.",
    "[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata of the Delta table "
    "has been changed by a concurrent update.",
]

# Errors that only mention a race (found by an adversarial review): retrying them would
# stall the shard for good.
NOT_RACES = [
    "[CAST_INVALID_INPUT] The value 'DELTA_CONCURRENT_WRITE' of the type STRING cannot be "
    "cast to INT",
    "[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields 'MetadataChangedException'",
    "[PATH_NOT_FOUND] Path does not exist: s3a://b/ProtocolChangedException/t.",
    "org.apache.spark.SparkConcurrentModificationException: [CONCURRENT_QUERY] Another "
    "instance of this query was just started by a concurrent session.",
    "An error occurred while calling o7.save.\n: java.util.ConcurrentModificationException"
    "\n\tat java.util.Hashtable$Enumerator.next",
    "PythonException: ValueError: record says ConcurrentAppendException",
    "[DELTA_MISSING_DELTA_TABLE] `/t` is not a Delta table.",
    "java.io.IOException: No space left on device",
]


class Condition(Exception):
    """A pyspark error as pyspark 4 raises it: its class from getCondition()."""

    def __init__(self, condition: str, message: str = "") -> None:
        super().__init__(message)
        self.condition = condition

    def getCondition(self) -> str:  # pyspark's name
        return self.condition


class Unreadable(Exception):
    def __str__(self) -> str:
        raise ConnectionRefusedError("the JVM behind this py4j error is gone")


def test_races_are_told_apart_from_errors_that_mention_one() -> None:
    assert all(is_conflict(RuntimeError(message)) for message in CONFLICTS)
    assert not any(is_conflict(RuntimeError(message)) for message in NOT_RACES)
    assert is_conflict(Condition("DELTA_CONCURRENT_WRITE.WITH_PARTITION_HINT"))
    assert not is_conflict(Condition("CAST_INVALID_INPUT", CONFLICTS[0]))
    assert not is_conflict(Unreadable())


@pytest.mark.parametrize("message", CONFLICTS)
def test_a_lost_commit_race_runs_again(message: str) -> None:
    attempts: list[int] = []
    pauses: list[float] = []

    def write() -> str:
        attempts.append(1)
        if len(attempts) < 12:
            raise RuntimeError(message)
        return "committed"

    result = until_committed(write, "t", sleep=pauses.append, jitter=lambda: 1.0)
    assert result == ("committed", 11)
    assert pauses[0] < pauses[1] < pauses[2]
    assert max(pauses) == MAX_DELAY_SECONDS


OLD_BACKSTOP = 100  # lost races after which the error used to be the processor's


def test_lost_races_never_run_out_and_their_pause_is_capped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten times the races after which the error used to reach the failure policy (where
    `then: skip` would drop the batch): the write still commits. Only the call's
    timeoutSeconds ends a write that keeps losing (the worker restarts; nothing skipped)."""
    pauses: list[float] = []
    lost = 10 * OLD_BACKSTOP

    def lost_a_thousand_times() -> str:
        if len(pauses) < lost:
            raise RuntimeError(CONFLICTS[len(pauses) % len(CONFLICTS)])
        return "committed"

    with caplog.at_level(logging.INFO, logger="streamconsumer.spark.delta_tables"):
        result = until_committed(
            lost_a_thousand_times, "t", sleep=pauses.append, jitter=lambda: 3.0
        )
    assert result == ("committed", lost)
    assert len(pauses) == lost
    assert max(pauses) == MAX_DELAY_SECONDS
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == lost // WARN_EVERY
    assert "(1000 so far)" in warnings[-1].getMessage()


def test_an_error_after_many_lost_races_is_raised_at_once() -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise RuntimeError(CONFLICTS[0] if len(calls) <= 2 * OLD_BACKSTOP else NOT_RACES[-1])

    with pytest.raises(RuntimeError, match="No space left on device"):
        until_committed(write, "t", sleep=lambda _: None)
    assert len(calls) == 2 * OLD_BACKSTOP + 1


@pytest.mark.parametrize("message", NOT_RACES)
def test_any_other_error_is_raised_at_once(message: str) -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise RuntimeError(message)

    with pytest.raises(RuntimeError) as raised:
        until_committed(write, "t", sleep=lambda _: None)
    assert str(raised.value) == message
    assert calls == [1]
