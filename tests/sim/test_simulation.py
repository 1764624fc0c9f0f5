"""The guarantees under combined faults (issue 11): hypothesis generates consumers and
fault schedules; the simulation checks every invariant after every event.

`make test` runs a bounded budget (SIM_EXAMPLES, seeded: the same examples on every
machine, so a failure is never one run in three), cut into SHARDS parts of their own
seed that xdist runs side by side; `make soak` explores new ones for as long as it is
given (sim/soak.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings

from sim.ledger import Violation
from sim.regressions import REGRESSIONS
from sim.reverts import reverted
from sim.scenario import Run, simulate
from sim.strategies import runs

EXAMPLES = int(os.environ.get("SIM_EXAMPLES", "600"))
SHARDS = 6


# CPU-bound and deterministic: its wall time is the machine's load, not a hang (600
# examples take about 6 minutes of one idle core, 15 beside the suite's other workers).
# The examples are the same on every run: what they catch is a change that breaks one of
# them; the new schedules are `make soak`'s, and a bug it finds becomes a regression.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_fault_in_any_order_breaks_an_invariant(shard: int) -> None:
    @seed(shard)
    @settings(
        max_examples=-(-EXAMPLES // SHARDS),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(runs())
    def explore(run: Run) -> None:
        simulate(run)

    explore()


@pytest.mark.parametrize("name", REGRESSIONS)
def test_regression_example_holds(name: str) -> None:
    simulate(REGRESSIONS[name].run)


@pytest.mark.parametrize("name", REGRESSIONS)
def test_the_simulation_sees_the_bug_once_its_fix_is_reverted(name: str) -> None:
    regression = REGRESSIONS[name]
    with reverted(regression.revert), pytest.raises(Violation, match=regression.shows):
        simulate(regression.run)
