"""`make soak`: the simulation on new examples for as long as it is given.

    python -m sim.soak --minutes 20

Runs hypothesis in chunks, each from a fresh seed (make test runs a fixed set), and
prints what it did: examples, simulated steps, faults injected, violations. A violation
is shrunk by hypothesis and printed as a Run to paste into sim/regressions.py; the exit
status is 1 if there was any."""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, given, seed, settings

from sim.ledger import Violation
from sim.scenario import Run, simulate
from sim.strategies import runs

CHUNK = 200


class Tally:
    def __init__(self) -> None:
        self.examples = 0
        self.steps = 0
        self.simulated_seconds = 0.0
        self.faults: Counter[str] = Counter()
        self.duplicates_after_unplanned = 0
        self.violations: list[tuple[str, Run]] = []
        self.last_failing: Run | None = None

    def line(self, started: float) -> str:
        minutes = (time.monotonic() - started) / 60
        return (
            f"{minutes:5.1f} min  examples {self.examples:7d}  steps {self.steps:11d}  "
            f"faults {sum(self.faults.values()):7d}  violations {len(self.violations)}"
        )


def soak(minutes: float, rng: random.Random) -> Tally:
    tally = Tally()
    started = time.monotonic()
    deadline = started + minutes * 60

    def one(run: Run) -> None:
        try:
            outcome = simulate(run)
        except Violation:
            tally.last_failing = run
            raise
        tally.examples += 1
        tally.steps += outcome.steps
        tally.simulated_seconds += run.duration
        tally.faults.update(outcome.faults)
        tally.duplicates_after_unplanned += outcome.duplicates

    while time.monotonic() < deadline:
        chunk = seed(rng.randrange(2**63))(
            settings(
                max_examples=CHUNK,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )(given(runs())(one))
        )
        try:
            chunk()
        except Violation as violation:
            assert tally.last_failing is not None
            tally.violations.append((str(violation), tally.last_failing))
            print(f"VIOLATION: {violation}\n  shrunk to: {tally.last_failing!r}", flush=True)
        print(tally.line(started), flush=True)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=None, help="of the chunks' seeds")
    args = parser.parse_args()
    # The simulated replicas log as the operator does (a new leader at WARNING): the
    # soak's output is its tally.
    logging.getLogger("streamconsumer").setLevel(logging.ERROR)
    tally = soak(args.minutes, random.Random(args.seed))
    print(
        f"\nsoak: {tally.examples} examples, {tally.steps} steps, "
        f"{tally.simulated_seconds / 3600:.1f} simulated hours, "
        f"{sum(tally.faults.values())} faults injected, {len(tally.violations)} violations"
    )
    for kind, count in sorted(tally.faults.items()):
        print(f"  {kind:16s} {count}")
    print(f"  duplicates after unplanned faults (allowed): {tally.duplicates_after_unplanned}")
    sys.exit(1 if tally.violations else 0)


if __name__ == "__main__":
    main()
