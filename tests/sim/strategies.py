"""Hypothesis strategies for simulated runs: any mix of faults, in any order, at any
time, against any shape of consumer. Shrinking drops faults and simplifies the shape, so
a failure ends as a short schedule (a regression example)."""

from __future__ import annotations

from hypothesis import strategies as st

from sim.scenario import KINDS, LEASES, Fault, Run


def faults(duration: float) -> st.SearchStrategy[Fault]:
    return st.builds(
        Fault,
        at=st.floats(1.0, duration - 1.0).map(lambda t: round(t, 2)),
        kind=st.sampled_from(KINDS),
        arg=st.integers(0, 9),
        seconds=st.floats(0.5, 12.0).map(lambda s: round(s, 2)),
    )


@st.composite
def runs(draw: st.DrawFn, max_faults: int = 30) -> Run:
    duration = draw(st.sampled_from((60.0, 120.0)))
    schedule = draw(st.lists(faults(duration), max_size=max_faults))
    return Run(
        seed=draw(st.integers(0, 2**32 - 1)),
        shards=draw(st.integers(1, 4)),
        replicas=draw(st.integers(0, 4)),
        lease=draw(st.sampled_from(LEASES)),
        processor=draw(st.sampled_from(("recorder", "sink"))),
        checkpoint_every=draw(st.integers(0, 3)),
        faults=tuple(sorted(schedule, key=lambda fault: fault.at)),
        duration=duration,
        autoscale=draw(st.booleans()),
        initial_position=draw(st.sampled_from(("TRIM_HORIZON", "LATEST"))),
        history=draw(st.sampled_from((0, 20))),
        on_failure=draw(st.sampled_from(("block", "skip", "deadLetter"))),
        max_record_age=draw(st.sampled_from((None, 2.0, 10.0))),
        filtered=draw(st.booleans()),
        operators=draw(st.integers(1, 3)),
        newer_peers=draw(st.booleans()),
        parallelism=draw(st.sampled_from((1, 1, 3))),  # drawn last: the others' draws stay
        batch_size=draw(st.sampled_from((None, None, 2))),
        asynchronous=draw(st.booleans()),
        processes=draw(st.sampled_from((1, 1, 2))),
        lease_groups=draw(st.sampled_from((0, 0, 1, 3))),
        batching_window=draw(st.sampled_from((0.0, 0.0, 1.5))),
        end=draw(st.sampled_from((None, None, None, 25.0, 100.0))),
    )
