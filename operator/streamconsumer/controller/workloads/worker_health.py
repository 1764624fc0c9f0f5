"""Whether the workers' pods start, as the kubelet and the apiserver say (pure).

A Deployment that applies fine may still never run a worker: the image cannot be pulled,
a Secret the pod needs is missing, the process crashes at start, no node fits, or the
ReplicaSet may not make pods at all (a quota, an admission policy). None of that shows in
the Deployment's apply. Two cheap sources tell it:

- the worker pods, from the pod watch the operator keeps anyway (handlers.py): a
  container waiting for one of `FAILING_WAITS`, or a pod the scheduler cannot place;
- the Deployment's own conditions (`ReplicaFailure`, `Progressing` False with
  `ProgressDeadlineExceeded`), read every `DEPLOYMENT_CHECK_SECONDS` (one GET per
  consumer, a right the operator already has), every `ROLLOUT_CHECK_SECONDS` while a
  new spec rolls out.

The same read tells whether a rollout is complete, as `kubectl rollout status` decides
it: a consumer's new spec counts as observed only once its workers run it.

`WorkerHealth` is what the status renders (docs/troubleshooting.md#workersnotstarting)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamconsumer.sources.aws import summary

DEPLOYMENT_CHECK_SECONDS = 15.0
ROLLOUT_CHECK_SECONDS = 3.0
MESSAGE_CHARS = 400  # of one pod's or the Deployment's words, in a condition's message
WORKERS_NOT_STARTING = "WorkersNotStarting"

# A container waiting for one of these will not start by itself (the kubelet retries with
# a back-off, but only a change somewhere else ends it). ContainerCreating and
# PodInitializing are the normal ways to wait and are not here.
FAILING_WAITS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


@dataclass(frozen=True, order=True)
class Trouble:
    """Why one pod (or the Deployment, `pod` None) does not start workers."""

    reason: str  # the kubelet's or controller's word: ImagePullBackOff, ReplicaFailure...
    pod: str | None
    message: str

    def describe(self) -> str:
        where = f"pod {self.pod}" if self.pod else "Deployment"
        words = f": {self.message}" if self.message else ""
        return f"{self.reason} ({where}){words}"


def _bounded(text: Any) -> str:
    return summary(str(text or ""), MESSAGE_CHARS)


def pod_trouble(pod: Mapping[str, Any]) -> Trouble | None:
    """Why this worker pod does not start; None if nothing says it will not. A pod on its
    way out (deleted) is no longer a worker that should start."""
    metadata = pod.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return None
    name = metadata.get("name")
    status = pod.get("status") or {}
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in FAILING_WAITS:
            message = waiting.get("message") or ""
            if reason == "CrashLoopBackOff":
                last = (container.get("lastState") or {}).get("terminated") or {}
                exit_code = last.get("exitCode")
                said = last.get("message") or last.get("reason") or ""
                message = f"exit code {exit_code}" + (f": {said}" if said else "")
            return Trouble(str(reason), name, _bounded(message))
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return Trouble("Unschedulable", name, _bounded(condition.get("message")))
    return None


@dataclass(frozen=True)
class Replicas:
    """The Deployment as last read: what it wants and has, and why it cannot make pods."""

    desired: int
    available: int
    trouble: Trouble | None = None
    rollout: str | None = None  # why the rollout is not complete; None: it is


def rollout(deployment: Mapping[str, Any]) -> str | None:
    """What a rollout still waits for, by `kubectl rollout status`'s rules (any strategy:
    with maxUnavailable 0 no fewer pods are available mid-rollout than desired); None
    once the Deployment's controller has the spec and every pod runs it."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return "the workers' Deployment has a new spec its controller has not seen yet"
    desired = spec.get("replicas")
    desired = 1 if desired is None else int(desired)
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < desired:
        return f"{updated}/{desired} worker pods run the new spec"
    if total > updated:
        return f"{total - updated} old worker pods still to stop"
    if available < updated:
        return f"{available}/{updated} worker pods of the new spec available"
    return None


def deployment_replicas(deployment: Mapping[str, Any]) -> Replicas:
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    trouble = None
    for condition in status.get("conditions") or []:
        kind, state = condition.get("type"), condition.get("status")
        if kind == "ReplicaFailure" and state == "True":
            trouble = Trouble("ReplicaFailure", None, _bounded(condition.get("message")))
            break
        if (
            kind == "Progressing"
            and state == "False"
            and condition.get("reason") == "ProgressDeadlineExceeded"
        ):
            trouble = Trouble("ProgressDeadlineExceeded", None, _bounded(condition.get("message")))
    desired = spec.get("replicas")
    return Replicas(
        desired=1 if desired is None else int(desired),  # the apiserver's default
        available=int(status.get("availableReplicas") or 0),
        trouble=trouble,
        rollout=rollout(deployment),
    )


@dataclass(frozen=True)
class WorkerHealth:
    """The workers' pods and Deployment, for the status: `troubles` from each pod that
    will not start and from the Deployment; `replicas` None until it was read."""

    troubles: tuple[Trouble, ...] = ()
    replicas: Replicas | None = None

    @classmethod
    def of(cls, pods: Mapping[str, Trouble | None], replicas: Replicas | None) -> WorkerHealth:
        troubles = sorted(t for t in pods.values() if t is not None)
        if replicas is not None and replicas.trouble is not None:
            troubles.insert(0, replicas.trouble)  # the Deployment's words first
        return cls(tuple(troubles), replicas)

    def not_starting(self) -> str | None:
        """Why workers do not start, in the kubelet's or apiserver's words; None if
        nothing says they will not."""
        if not self.troubles:
            return None
        first = self.troubles[0]
        pods = sum(1 for t in self.troubles if t.pod is not None)
        others = pods - (1 if first.pod is not None else 0)
        more = f" (and {others} more pods not starting)" if others > 0 else ""
        return first.describe() + more

    def starting(self) -> str | None:
        """Fewer workers available than the Deployment wants, with nothing failing (a
        rollout, a scale-up under way); None otherwise."""
        replicas = self.replicas
        if replicas is None or self.troubles or replicas.available >= replicas.desired:
            return None
        return f"{replicas.available}/{replicas.desired} worker pods available"

    def rolling_out(self) -> str | None:
        """What the workers' rollout waits for, nothing failing; None: none under way
        (or not known yet)."""
        replicas = self.replicas
        return None if replicas is None or self.troubles else replicas.rollout

    def scaled_to_zero(self) -> bool:
        """The Deployment, as last read, wants no worker pod."""
        return self.replicas is not None and self.replicas.desired == 0
