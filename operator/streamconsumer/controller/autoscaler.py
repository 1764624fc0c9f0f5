"""The built-in lag autoscaler of one consumer: it feeds the reported lag to the pure
decision in `core.autoscale` and scales the worker Deployment (never the user's spec: in
GitOps, spec.replicas stays what the repository says; with autoscaling on, the operator
owns the Deployment's replica count instead)."""

from __future__ import annotations

from collections.abc import Callable

from streamconsumer.controller.state import Coordinator
from streamconsumer.core.autoscale import ScalingPolicy, Stabilizer, recommend
from streamconsumer.models.resource import Autoscaling


def policy_of(autoscaling: Autoscaling | None) -> ScalingPolicy | None:
    if autoscaling is None or not autoscaling.enabled:
        return None
    return ScalingPolicy(
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        target_lag_seconds=autoscaling.target_lag_seconds,
        scale_up_window=autoscaling.scale_up_stabilization_seconds,
        scale_down_window=autoscaling.scale_down_stabilization_seconds,
        allow_idle_workers=autoscaling.allow_idle_workers,
    )


class Autoscaler:
    def __init__(self, replicas: int, scale: Callable[[int], None]) -> None:
        self.replicas = replicas  # what the Deployment was last set to
        self._scale = scale
        self._stabilizer: Stabilizer | None = None
        self._policy: ScalingPolicy | None = None

    def tick(self, now: float, coordinator: Coordinator) -> tuple[int, int, float] | None:
        """Decides and, on a change, scales; returns (from, to, lag seconds) when it did."""
        policy = policy_of(coordinator.spec.autoscaling)
        if policy is None or not coordinator.shards_known:
            self._policy = self._stabilizer = None
            return None
        if policy != self._policy or self._stabilizer is None:
            self._policy, self._stabilizer = policy, Stabilizer(policy)
        lag = max(coordinator.lag_millis().values(), default=0) / 1000
        wanted = recommend(policy, self.replicas, lag, len(coordinator.assignable()))
        decided = self._stabilizer.decide(now, self.replicas, wanted)
        if decided == self.replicas:
            return None
        before, self.replicas = self.replicas, decided
        self._scale(decided)
        return before, decided, lag
