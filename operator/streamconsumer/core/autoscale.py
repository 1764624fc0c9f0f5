"""The lag autoscaler's decision, pure: from the lag the workers report, how many workers
a consumer should have. Shaped like the HPA's algorithm — a proportional recommendation,
then stabilization windows — so it behaves the way Kubernetes users expect:

- recommendation = ceil(current * lag / target), clamped to [min, max] and, unless idle
  workers are allowed, to the number of assignable shards (a worker with no shard helps
  nobody);
- scale up only as far as every recommendation in the up-window agreed, scale down only as
  far as the largest recommendation in the down-window allows: a burst or a dip shorter
  than the window changes nothing, so the consumer does not flap."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    min_replicas: int
    max_replicas: int
    target_lag_seconds: float
    scale_up_window: float = 30.0
    scale_down_window: float = 300.0
    allow_idle_workers: bool = False


def recommend(policy: ScalingPolicy, current: int, lag_seconds: float, assignable: int) -> int:
    """The raw recommendation for the observed lag (the largest over the shards)."""
    base = max(current, 1)
    wanted = math.ceil(base * lag_seconds / policy.target_lag_seconds) if lag_seconds > 0 else 0
    upper = policy.max_replicas
    if not policy.allow_idle_workers:
        upper = min(upper, max(assignable, policy.min_replicas, 1))
    return max(policy.min_replicas, min(wanted, upper))


@dataclass
class Stabilizer:
    policy: ScalingPolicy
    _history: deque[tuple[float, int]] = field(default_factory=deque)

    def decide(self, now: float, current: int, recommendation: int) -> int:
        """The replicas to run now, given the recommendations seen so far."""
        self._history.append((now, recommendation))
        horizon = max(self.policy.scale_up_window, self.policy.scale_down_window)
        # Keep one sample older than the horizon: it is what was in force at its start.
        while len(self._history) > 1 and now - self._history[1][0] > horizon:
            self._history.popleft()
        if recommendation > current:
            agreed = min(self._window(now, self.policy.scale_up_window))
            return max(current, min(recommendation, agreed))
        if recommendation < current:
            allowed = max(self._window(now, self.policy.scale_down_window))
            return min(current, max(recommendation, allowed))
        return current

    def _window(self, now: float, seconds: float) -> list[int]:
        """Recommendations in force during the last `seconds`: those made in it, and the
        one made before it that still held when it began."""
        start = now - seconds
        inside = [r for t, r in self._history if t >= start]
        before = [r for t, r in self._history if t < start]
        return inside + before[-1:]
