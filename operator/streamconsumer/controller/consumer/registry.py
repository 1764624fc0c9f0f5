"""The consumers this operator process manages, shared by the loops and the API."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from streamconsumer.controller.consumer.loop import ConsumerLoop
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.render import Children
from streamconsumer.controller.workloads.worker_health import (
    DEPLOYMENT_CHECK_SECONDS,
    ROLLOUT_CHECK_SECONDS,
    Replicas,
    Trouble,
    WorkerHealth,
)


class ManagedConsumer:
    def __init__(
        self,
        namespace: str,
        name: str,
        loop: ConsumerLoop,
        owner: Mapping[str, Any] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.loop = loop
        # The StreamConsumer (kopf's live view, a kopf.Body): what owns the objects applied for it
        # outside its handlers (ca_upkeep). None in tests that apply nothing.
        self.owner = owner
        self.coordinator: LeaseCoordinator = loop.coordinator
        self._wake = asyncio.Event()
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []  # (version, waiter)

    @property
    def serving(self) -> bool:
        """Its term's fence has landed and no newer term took over."""
        return self.loop.serving

    def wake(self) -> None:
        """Something changed (a heartbeat, a checkpoint, a finished job): run the loop soon."""
        self._wake.set()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def persisted(self, version: int) -> None:
        """Returns once the status holds every change up to `version`."""
        if self.coordinator.persisted_version >= version:
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (version, waiter)
        self._waiting.append(entry)
        try:
            await waiter
        finally:
            if entry in self._waiting:
                self._waiting.remove(entry)

    def notify_persisted(self) -> None:
        """The status was written: wake the checkpoints waiting for what it now holds."""
        saved = self.coordinator.persisted_version
        for version, waiter in list(self._waiting):
            if version <= saved and not waiter.done():
                waiter.set_result(None)


class Registry:
    """Consumers by (namespace, name). A consumer not loaded yet, or whose fencing write
    has not landed, gets "come back" (503) rather than 404; so does any name during a
    grace period after this replica started leading, while kopf lists and loads."""

    def __init__(self, clock: Callable[[], float], startup_grace: float = 30.0) -> None:
        self._consumers: dict[tuple[str, str], ManagedConsumer] = {}
        self._loading: set[tuple[str, str]] = set()
        # How applying each consumer's objects last went (None: applied), kept across its
        # loop's restarts: kopf applies them on its own schedule, not the loop's.
        self._children: dict[tuple[str, str], Children] = {}
        # Each consumer's worker pods that do not start (by uid) and its Deployment as
        # last read, kept across its loop's restarts like _children.
        self._pods: dict[tuple[str, str], dict[str, Trouble]] = {}
        self._replicas: dict[tuple[str, str], Replicas] = {}
        # The generation whose spec each consumer's objects and loop last got.
        self._generations: dict[tuple[str, str], int] = {}
        # The generation last applied or refused, and when (this registry's clock): its
        # workers run it once a Deployment read begun after that finds the rollout done.
        self._applied: dict[tuple[str, str], tuple[int, float]] = {}
        # The generation whose workers run (or that got a verdict): status.observedGeneration.
        self._observed: dict[tuple[str, str], int] = {}
        self._read_begun: dict[tuple[str, str], float] = {}  # its Deployment's last read
        # Who asked for the pause in force (None: it runs), as its handler recorded it:
        # that handler may run before the loop is loaded, from a body whose requester
        # annotation is gone by then (docs/security.md#audit).
        self._paused_by: dict[tuple[str, str], str | None] = {}
        self._clock = clock
        self._grace = startup_grace
        self._ready_at: float | None = None  # not leading yet: everything is "later"

    def now(self) -> float:
        """The clock the consumers' loops run on."""
        return self._clock()

    def leading(self) -> None:
        """This replica leads from now on: kopf starts loading the consumers."""
        self._ready_at = self._clock() + self._grace

    def get(self, namespace: str, name: str) -> ManagedConsumer | None:
        return self._consumers.get((namespace, name))

    def managed(self) -> list[ManagedConsumer]:
        """Every consumer loaded here, as of now."""
        return list(self._consumers.values())

    def starting(self, namespace: str, name: str) -> bool:
        """Not managed (yet): still loading it, or too soon after leading to know."""
        return (
            (namespace, name) in self._loading
            or self._ready_at is None
            or self._clock() < self._ready_at
        )

    def loading(self, namespace: str, name: str) -> None:
        self._loading.add((namespace, name))

    def add(self, consumer: ManagedConsumer) -> None:
        key = (consumer.namespace, consumer.name)
        self._loading.discard(key)
        self._consumers[key] = consumer
        if key in self._children:
            consumer.loop.children_now(self._children[key])
        if key in self._paused_by:
            consumer.loop.pause_asked(self._paused_by[key])
        if key in self._pods or key in self._replicas:
            consumer.loop.workers_now(self._health(key))
        if key in self._observed:
            consumer.loop.observed_now(self._observed[key])

    def children_applied(self, namespace: str, name: str, error: str | None) -> None:
        """The outcome of applying a consumer's objects (None: all applied), for its
        status now or once its loop runs."""
        self._children_now(namespace, name, Children(known=True, error=error))

    def children_failed(self, namespace: str, name: str, why: str) -> None:
        """Applying a consumer's objects failed, for a passing reason (tried again): they
        are not known applied, whatever an earlier attempt achieved."""
        self._children_now(namespace, name, Children(failed=why))

    def _children_now(self, namespace: str, name: str, children: Children) -> None:
        self._children[(namespace, name)] = children
        consumer = self.get(namespace, name)
        if consumer is not None:
            consumer.loop.children_now(children)
            consumer.wake()

    def pod_seen(self, namespace: str, name: str, uid: str, trouble: Trouble | None) -> None:
        """A worker pod of consumer `name`, as the pod watch saw it (trouble: why it does
        not start; None: nothing says it will not)."""
        key = (namespace, name)
        pods = self._pods.get(key, {})
        if pods.get(uid) == trouble:
            return
        if trouble is None:
            pods.pop(uid, None)
        else:
            pods[uid] = trouble
        if pods:
            self._pods[key] = pods
        else:
            self._pods.pop(key, None)
        self._workers_changed(key)

    def pod_gone(self, namespace: str, name: str, uid: str) -> None:
        self.pod_seen(namespace, name, uid, None)

    def deployment_seen(
        self, namespace: str, name: str, replicas: Replicas, read_at: float
    ) -> None:
        """The workers' Deployment as a read started at `read_at` found it."""
        key = (namespace, name)
        consumer = self._consumers.get(key)
        if consumer is not None and consumer.loop.deployment_read(replicas.desired, read_at):
            consumer.wake()  # the autoscaler decides again from the count found
        if self._replicas.get(key) != replicas:
            self._replicas[key] = replicas
            self._workers_changed(key)
        applied = self._applied.get(key)
        # A read begun before the apply may land after it: it says nothing of the new spec.
        if applied is None or read_at < applied[1]:
            return
        if replicas.rollout is None or self._health(key).not_starting() is not None:
            self._observe(key, applied[0])  # running, or a verdict (Stalled says why)

    def rolling_out(self, namespace: str, name: str) -> bool:
        """A generation is applied whose workers are not known to run it yet."""
        applied = self._applied.get((namespace, name))
        return applied is not None and self._observed.get((namespace, name)) != applied[0]

    def deployment_read_due(self, namespace: str, name: str, force: bool = False) -> bool:
        """Is it time to read the consumer's Deployment (`force`: it is)? Taken as begun."""
        key, now = (namespace, name), self._clock()
        every = (
            ROLLOUT_CHECK_SECONDS if self.rolling_out(namespace, name) else DEPLOYMENT_CHECK_SECONDS
        )
        if not force and now - self._read_begun.get(key, -math.inf) < every:
            return False
        self._read_begun[key] = now
        return True

    def _observe(self, key: tuple[str, str], generation: int) -> None:
        if self._observed.get(key) == generation:
            return
        self._observed[key] = generation
        consumer = self._consumers.get(key)
        if consumer is not None:
            consumer.loop.observed_now(generation)
            consumer.wake()

    def _health(self, key: tuple[str, str]) -> WorkerHealth:
        return WorkerHealth.of(self._pods.get(key, {}), self._replicas.get(key))

    def _workers_changed(self, key: tuple[str, str]) -> None:
        consumer = self._consumers.get(key)
        if consumer is not None:
            consumer.loop.workers_now(self._health(key))
            consumer.wake()

    def pause_asked(self, namespace: str, name: str, by: str | None) -> None:
        """Who paused a consumer (None: resumed), for its status now or once its loop
        runs."""
        self._paused_by[(namespace, name)] = by
        consumer = self.get(namespace, name)
        if consumer is not None:
            consumer.loop.pause_asked(by)
            consumer.wake()

    def spec_applied(self, namespace: str, name: str, generation: int) -> None:
        """The workers' objects of this generation are applied: it is observed once a
        Deployment read begun from now finds them rolled out (`deployment_seen`)."""
        self._generations[(namespace, name)] = generation
        self._applied[(namespace, name)] = (generation, self._clock())

    def spec_refused(self, namespace: str, name: str, generation: int) -> None:
        """This generation will not be applied as it is (a policy, an object not ours): a
        verdict, observed at once; Stalled says why."""
        self._applied[(namespace, name)] = (generation, self._clock())
        self._observe((namespace, name), generation)

    def behind(self, namespace: str, name: str, generation: int) -> bool:
        """Its objects and loop have not had this generation's spec (yet)."""
        return self._generations.get((namespace, name)) != generation

    def forget(self, namespace: str, name: str) -> None:
        """The consumer is gone."""
        self._children.pop((namespace, name), None)
        self._generations.pop((namespace, name), None)
        self._applied.pop((namespace, name), None)
        self._observed.pop((namespace, name), None)
        self._read_begun.pop((namespace, name), None)
        self._paused_by.pop((namespace, name), None)
        self._pods.pop((namespace, name), None)
        self._replicas.pop((namespace, name), None)

    def remove(self, namespace: str, name: str) -> None:
        self._loading.discard((namespace, name))
        self._consumers.pop((namespace, name), None)

    def idle(self) -> bool:
        """No consumer loop runs, and none is loading."""
        return not self._consumers and not self._loading
