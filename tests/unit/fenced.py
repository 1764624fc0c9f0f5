"""A managed consumer as the API sees it once its term's fence has landed."""

from __future__ import annotations

from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator


def fenced_consumer(namespace: str, name: str, coordinator: LeaseCoordinator) -> ManagedConsumer:
    """`coordinator` served from a loop whose first write (the fence) has landed."""
    loop = ConsumerLoop(name, coordinator, LoopSettings(), lambda: 1)
    fence = loop.write_due(0.0)
    assert fence is not None
    loop.write_succeeded(fence, 0.0)
    return ManagedConsumer(namespace, name, loop)
