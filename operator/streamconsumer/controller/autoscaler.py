"""The built-in lag autoscaler of one consumer: it feeds the lag to the pure decision in
`core.autoscale` and says how many workers the Deployment should run (never the user's
spec: in GitOps, spec.replicas stays what the repository says; with autoscaling on, the
operator owns the Deployment's replica count instead). The loop's runner scales.

The lag includes what the operator measures itself for shards no live worker owns, so a
consumer scaled to zero, or short of workers under maxPerWorker, still scales up."""

from __future__ import annotations

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
    """One term's autoscaler. It starts from the count the status saved, but the term
    before may have scaled the Deployment and died before saving it, so until one of its
    own scale calls succeeds it applies its decision even when that looks unchanged."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas  # what the Deployment was last set to, as far as we know
        self._applied = False  # has this term set the Deployment itself yet
        self._stabilizer: Stabilizer | None = None
        self._policy: ScalingPolicy | None = None

    def decide(
        self, now: float, autoscaling: Autoscaling | None, lag_seconds: float, assignable: int
    ) -> tuple[int, int] | None:
        """(from, to) when the Deployment should change; the caller scales, then calls
        `scaled` (or not, if scaling failed: the next decision tries again)."""
        policy = policy_of(autoscaling)
        if policy is None:
            self._policy = self._stabilizer = None
            return None
        if policy != self._policy or self._stabilizer is None:
            self._policy, self._stabilizer = policy, Stabilizer(policy)
        wanted = recommend(policy, self.replicas, lag_seconds, assignable)
        decided = self._stabilizer.decide(now, self.replicas, wanted)
        if decided == self.replicas and self._applied:
            return None
        return (self.replicas, decided)

    def scaled(self, replicas: int) -> None:
        self.replicas, self._applied = replicas, True
