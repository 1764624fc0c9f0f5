"""The consumers this operator process manages, shared by the loops and the API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from streamconsumer.controller.state import Coordinator


def worker_service_account(consumer: str) -> str:
    return f"{consumer}-worker"


def worker_deployment(consumer: str) -> str:
    return f"{consumer}-workers"


def operator_ca(consumer: str) -> str:
    """The ConfigMap holding the operator's CA certificate for this consumer's workers."""
    return f"{consumer}-operator-ca"


class ManagedConsumer:
    def __init__(self, namespace: str, name: str, coordinator: Coordinator) -> None:
        self.namespace = namespace
        self.name = name
        self.coordinator = coordinator
        self._wake = asyncio.Event()
        self._persisted = asyncio.Condition()

    def wake(self) -> None:
        """Something changed (a heartbeat, a checkpoint, a finished job): run the loop soon."""
        self._wake.set()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def persisted(self, version: int) -> None:
        """Returns once the status holds every change up to `version`."""
        async with self._persisted:
            await self._persisted.wait_for(lambda: self.coordinator.persisted_version >= version)

    async def mark_persisted(self) -> None:
        async with self._persisted:
            self._persisted.notify_all()


class Registry:
    """Consumers by (namespace, name). Right after the operator starts, a consumer may
    not be loaded yet: `starting` tells the API to answer "come back" rather than 404."""

    def __init__(self, clock: Callable[[], float], startup_grace: float = 30.0) -> None:
        self._consumers: dict[tuple[str, str], ManagedConsumer] = {}
        self._loading: set[tuple[str, str]] = set()
        self._clock = clock
        self._ready_at = clock() + startup_grace

    def get(self, namespace: str, name: str) -> ManagedConsumer | None:
        return self._consumers.get((namespace, name))

    def starting(self, namespace: str, name: str) -> bool:
        """Not managed (yet): still loading it, or too soon after start to know."""
        return (namespace, name) in self._loading or self._clock() < self._ready_at

    def loading(self, namespace: str, name: str) -> None:
        self._loading.add((namespace, name))

    def add(self, consumer: ManagedConsumer) -> None:
        key = (consumer.namespace, consumer.name)
        self._loading.discard(key)
        self._consumers[key] = consumer

    def remove(self, namespace: str, name: str) -> None:
        self._loading.discard((namespace, name))
        self._consumers.pop((namespace, name), None)

    def idle(self) -> bool:
        """No consumer loop runs, and none is loading."""
        return not self._consumers and not self._loading
