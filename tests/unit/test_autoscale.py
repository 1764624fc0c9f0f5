"""The lag autoscaler's decision: proportional, bounded, and stable against bursts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.core.autoscale import ScalingPolicy, Stabilizer, recommend

POLICY = ScalingPolicy(
    min_replicas=1, max_replicas=8, target_lag_seconds=10, scale_up_window=5, scale_down_window=60
)


def test_recommendation_is_proportional_and_bounded() -> None:
    assert recommend(POLICY, current=2, lag_seconds=30, assignable=16) == 6
    assert recommend(POLICY, current=2, lag_seconds=0, assignable=16) == 1, "caught up: min"
    assert recommend(POLICY, current=8, lag_seconds=500, assignable=16) == 8, "max"
    assert recommend(POLICY, current=2, lag_seconds=500, assignable=4) == 4, "no idle workers"
    idle_ok = ScalingPolicy(1, 8, 10, allow_idle_workers=True)
    assert recommend(idle_ok, current=2, lag_seconds=500, assignable=4) == 8
    assert recommend(POLICY, current=0, lag_seconds=25, assignable=16) == 3, "from zero"


def test_a_burst_shorter_than_the_up_window_does_not_scale_up() -> None:
    stabilizer = Stabilizer(POLICY)
    assert stabilizer.decide(0, current=1, recommendation=1) == 1
    assert stabilizer.decide(1, current=1, recommendation=4) == 1, "the window still saw 1"
    assert stabilizer.decide(5.5, current=1, recommendation=4) == 1
    assert stabilizer.decide(6.5, current=1, recommendation=4) == 4, "agreed for the whole window"


def test_a_dip_shorter_than_the_down_window_does_not_scale_down() -> None:
    stabilizer = Stabilizer(POLICY)
    assert stabilizer.decide(0, current=4, recommendation=4) == 4
    assert stabilizer.decide(10, current=4, recommendation=1) == 4
    assert stabilizer.decide(69, current=4, recommendation=1) == 4, "1 only since t=10"
    assert stabilizer.decide(71, current=4, recommendation=1) == 1, "1 for a whole window"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 5), st.integers(0, 20)), min_size=1, max_size=60),
    st.integers(1, 8),
)
def test_decisions_stay_in_bounds_and_move_toward_the_recommendation(
    steps: list[tuple[float, int]], start: int
) -> None:
    stabilizer = Stabilizer(POLICY)
    now, current = 0.0, start
    for gap, raw in steps:
        now += gap
        recommendation = max(POLICY.min_replicas, min(raw, POLICY.max_replicas))
        decided = stabilizer.decide(now, current, recommendation)
        assert POLICY.min_replicas <= decided <= POLICY.max_replicas
        assert min(current, recommendation) <= decided <= max(current, recommendation)
        current = decided


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 8), max_size=20), st.integers(1, 8), st.integers(1, 8))
def test_a_steady_recommendation_is_reached_once_the_window_has_passed(
    noise: list[int], start: int, steady: int
) -> None:
    stabilizer = Stabilizer(POLICY)
    now, current = 0.0, start
    for value in noise:
        now += 1
        current = stabilizer.decide(now, current, value)
    end = now + POLICY.scale_down_window + 2
    while now < end:
        now += 1
        current = stabilizer.decide(now, current, steady)
    assert current == steady
