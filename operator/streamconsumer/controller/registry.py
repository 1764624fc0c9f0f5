"""The consumers this operator process manages, shared by the loops and the API."""

from __future__ import annotations

import asyncio
import contextlib

from streamconsumer.controller.state import Coordinator

CONSUMER_LABEL = "streamconsumer.io/consumer"


def worker_service_account(consumer: str) -> str:
    return f"{consumer}-worker"


def worker_deployment(consumer: str) -> str:
    return f"{consumer}-workers"


class ManagedConsumer:
    def __init__(self, namespace: str, name: str, coordinator: Coordinator) -> None:
        self.namespace = namespace
        self.name = name
        self.coordinator = coordinator
        self._wake = asyncio.Event()
        self._persisted = asyncio.Condition()

    def wake(self) -> None:
        """Something changed (a heartbeat, a checkpoint): run the loop soon."""
        self._wake.set()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def persisted(self, version: int) -> None:
        """Returns once the status holds every change up to `version`."""
        async with self._persisted:
            await self._persisted.wait_for(lambda: self.coordinator.persisted_version >= version)

    async def mark_persisted(self, version: int) -> None:
        async with self._persisted:
            self.coordinator.persisted_version = max(self.coordinator.persisted_version, version)
            self._persisted.notify_all()


class Registry:
    def __init__(self) -> None:
        self._consumers: dict[tuple[str, str], ManagedConsumer] = {}

    def get(self, namespace: str, name: str) -> ManagedConsumer | None:
        return self._consumers.get((namespace, name))

    def add(self, consumer: ManagedConsumer) -> None:
        self._consumers[(consumer.namespace, consumer.name)] = consumer

    def remove(self, namespace: str, name: str) -> None:
        self._consumers.pop((namespace, name), None)
