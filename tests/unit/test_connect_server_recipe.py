"""The Spark Connect server recipe a user pastes (docs/spark.md) and the one on Kubernetes
(examples/clickstream/spark/connect-server.yaml) say what the tested server runs
(tests/testbed/spark_cluster.py's `connect_server_argv`): Delta's extension and catalog,
Delta's jars, the FAIR scheduler, `spark.cores.max`. The documented command pastes into a
shell whole: every line but the last ends in one backslash, never two (a doubled one ended
the command before `spark.scheduler.mode=FAIR spark-internal`)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from testbed.spark_cluster import CONNECT_SERVER_CLASS, SparkCluster

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "spark.md"
MANIFEST = ROOT / "examples" / "clickstream" / "spark" / "connect-server.yaml"

# What a server must agree on with the tested one, value for value.
SAME_VALUE = (
    "spark.sql.extensions",
    "spark.sql.catalog.spark_catalog",
    "spark.scheduler.mode",
    "spark.cores.max",
)
# What it must set, to a value of its own (the port is the test's free one).
PRESENT = ("spark.connect.grpc.binding.port",)
OPTIONS_WITH_VALUES = {"--class", "--master", "--jars", "--packages", "--driver-java-options"}


@dataclass
class Submit:
    """A spark-submit command line, parsed as spark-submit reads it."""

    options: dict[str, str] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, argv: list[str]) -> Submit:
        assert Path(argv[0]).name == "spark-submit", argv[0]
        submit, words = cls(), iter(argv[1:])
        for word in words:
            if word == "--conf":
                key, _, value = next(words).partition("=")
                submit.conf[key] = value
            elif word in OPTIONS_WITH_VALUES:
                submit.options[word] = next(words)
            else:
                submit.rest.append(word)
        return submit


def documented_lines(markdown: str) -> list[str]:
    """The indented code block of docs/spark.md that starts the Connect server."""
    blocks = re.findall(r"(?m)(?:^ {4}.*\n)+", markdown)
    found = [block for block in blocks if CONNECT_SERVER_CLASS in block]
    assert len(found) == 1, f"{len(found)} Connect server recipes in {DOC.name}"
    return [line[4:] for line in found[0].splitlines()]


def continuation_problems(lines: list[str]) -> list[str]:
    """Why the lines would not run as one command in a shell: a line but the last that
    does not end in exactly one backslash, or a last line that does."""
    problems = []
    for number, line in enumerate(lines, 1):
        trailing = len(line) - len(line.rstrip("\\"))
        wanted = 0 if number == len(lines) else 1
        if trailing != wanted:
            problems.append(f"line {number} ends in {trailing} backslashes: {line!r}")
    return problems


def pasted(lines: list[str]) -> list[str]:
    """The words a shell runs for these continued lines."""
    return shlex.split(" ".join(line.removesuffix("\\") for line in lines))


@pytest.fixture
def tested(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Submit:
    """What the Spark tier's Connect server runs (jars from a directory, not fetched)."""
    (tmp_path / "delta-spark.jar").touch()
    monkeypatch.setenv("STREAMCONSUMER_SPARK_JARS", str(tmp_path))
    cluster = SparkCluster("spark://127.0.0.1:7077", "sc://127.0.0.1:15002", 8080)
    return Submit.parse(cluster.connect_server_argv(15002))


def agrees(recipe: Submit, tested: Submit) -> None:
    assert recipe.options["--class"] == tested.options["--class"] == CONNECT_SERVER_CLASS
    assert "--master" in recipe.options
    assert {"--jars", "--packages"} & recipe.options.keys(), "Delta's jars"
    for key in SAME_VALUE:
        assert recipe.conf.get(key) == tested.conf[key], key
    for key in PRESENT:
        assert key in recipe.conf, key
        assert key in tested.conf, key
    assert recipe.rest == tested.rest == ["spark-internal"]


def test_the_documented_command_pastes_whole() -> None:
    lines = documented_lines(DOC.read_text())
    assert continuation_problems(lines) == []


def test_the_documented_command_is_the_tested_one(tested: Submit) -> None:
    agrees(Submit.parse(pasted(documented_lines(DOC.read_text()))), tested)


def test_the_kubernetes_server_is_the_tested_one(tested: Submit) -> None:
    deployment = next(
        doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sh", "-c"]
    words = shlex.split(container["args"][0])
    assert words[0] == "exec"
    agrees(Submit.parse(words[1:]), tested)


def test_the_checks_can_fail(tested: Submit) -> None:
    """The recipe as it was: a doubled backslash, after which a shell ran a command without
    the FAIR scheduler and without spark-internal."""
    lines = [
        f"spark-submit --class {CONNECT_SERVER_CLASS} \\",
        "    --conf spark.cores.max=4 \\\\",
        "    --conf spark.scheduler.mode=FAIR spark-internal",
    ]
    assert continuation_problems(lines) == [f"line 2 ends in 2 backslashes: {lines[1]!r}"]
    as_run = shlex.split(lines[0].removesuffix("\\") + " " + lines[1])  # a shell stops there
    with pytest.raises(AssertionError):
        agrees(Submit.parse(as_run), tested)
