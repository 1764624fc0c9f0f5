"""How `make test` spreads the suite over xdist workers: which tests share a worker, and
which start first.

A test named here runs on the worker that runs the rest of its group: the real node is
one per machine; Spark (a JVM per mode, or in worker processes) would starve a
neighbour's leases if two ran at once; an integration file's module-scoped fixtures
(control planes of other versions, emulators) would start again on every worker that
took one of its tests. Every other test is a group of its own.

The groups are read from the test's id by `GroupedScheduling`, not from `xdist_group`
marks: pytest 9 no longer lets xdist fold a mark into the test's id, and `--dist
loadgroup` then spreads every group silently (pytest-xdist#1386)."""

from __future__ import annotations

import sys
import time
from pathlib import PurePosixPath

import pytest
from xdist.scheduler import LoadScopeScheduling

GROUP_OF_FOLDER = {"realnode": "realnode", "spark": "spark"}
GROUP_OF_FILE = {
    "test_cdc.py": "spark",
    "test_spark_pods.py": "spark",
    # A worker of their own, one cluster for both: a `spark` fixture's Connect session in
    # the same process made the cluster's Connect sessions hang there.
    "test_spark_cluster.py": "spark-cluster",
    "test_spark_cluster_pods.py": "spark-cluster",
}
GROUPED_BY_FILE = {"integration"}

# The run's longest chains start first (`make test` keeps xdist to the collection's order,
# `--no-loadscope-reorder`), so the run does not end waiting on one of them: the real
# node's and Spark's groups, then the simulation's CPU-bound parts.
STARTED_FIRST = ("realnode", "spark", "spark-cluster", "tests/sim/test_simulation.py")


def group(nodeid: str) -> str:
    """The group of the test with this id (`tests/<folder>/.../<file>.py::<name>`)."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    folder = path.parts[1] if len(path.parts) > 2 else ""
    if path.name in GROUP_OF_FILE:
        return GROUP_OF_FILE[path.name]
    if folder in GROUP_OF_FOLDER:
        return GROUP_OF_FOLDER[folder]
    return str(path) if folder in GROUPED_BY_FILE else nodeid


def start_rank(item: pytest.Item) -> int:
    """Where the item's group starts among the run's (lower first)."""
    for rank, start in enumerate(STARTED_FIRST):
        if start in (group(item.nodeid), item.nodeid.split("::", 1)[0]):
            return rank
    return len(STARTED_FIRST)


class GroupedScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's scope scheduling with `group` for the scope: a group is one unit of work,
    run by one worker."""

    # xdist's own file and group schedulings override this method the same way.
    def _split_scope(self, nodeid: str) -> str:
        return group(nodeid)


class Unfinished:
    """The tests begun and not yet ended (on the xdist controller, as workers report them):
    what a run interrupted by `make test`'s budget was still waiting on."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}  # node id: when it began (monotonic)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.running.pop(nodeid, None)

    def pytest_keyboard_interrupt(self) -> None:
        now = time.monotonic()
        for nodeid, began in sorted(self.running.items(), key=lambda item: item[1]):
            print(f"\nstill running after {now - began:.0f} s: {nodeid}", file=sys.stderr)


# The name under which a test keeps, with pytest's `record_property`, a line of what it
# counted (records lost, duplicates) that `make test` shows whether it passed or not.
COUNTS = "counts"


class Counts:
    """The lines tests kept as COUNTS, shown at the end of the run (on the xdist
    controller, from the workers' reports; pytest shows a passing test's output to nobody)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []  # (node id, line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.lines += [
                (report.nodeid, str(v)) for k, v in report.user_properties if k == COUNTS
            ]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.lines:
            terminalreporter.section("what the tests counted")
            for nodeid, line in self.lines:
                terminalreporter.write_line(f"{nodeid}: {line}")
