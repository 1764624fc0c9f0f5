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
    """One term's autoscaler. The count it starts from is what the status saved, and the
    count it last set need not be what the Deployment runs: the term before may have
    scaled it and died before saving the count, a scale call of an earlier term (or one
    of ours given up on as timed out) may land late, a hand may `kubectl scale` it. So
    the Deployment, as read after this term's last scale call, has the last word."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas  # what the Deployment runs, as far as we know
        self._set_at: float | None = None  # when this term's last scale call succeeded
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
        return None if decided == self.replicas else (self.replicas, decided)

    def scaled(self, replicas: int, now: float) -> None:
        self.replicas, self._set_at = replicas, now

    def deployment_read(self, replicas: int, read_at: float) -> bool:
        """The Deployment's replicas as a read started at `read_at` found them (a read
        started before this term's last scale call succeeded proves nothing); True when
        that is news, so the next decision starts from them."""
        if (self._set_at is not None and read_at < self._set_at) or replicas == self.replicas:
            return False
        self.replicas = replicas
        return True
