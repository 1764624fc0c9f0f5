"""Enhanced fan-out's life cycle on the operator's side: a fanOut StreamConsumer has a
stream consumer registered (ACTIVE) while it exists, and deregistered when it is deleted
or switched back to polling. The kopf handlers in main.py call these; the Kinesis calls
block, so they run in a thread."""

from __future__ import annotations

import asyncio
from typing import Any

from streamconsumer.models.resource import KinesisConsumer, Source
from streamconsumer.sources.factory import stream_consumers
from streamconsumer.sources.kinesis_consumer import consumer_name


def uses_fan_out(source: Source) -> bool:
    kinesis = source.kinesis
    return kinesis is not None and kinesis.consumer is KinesisConsumer.FAN_OUT


async def register(namespace: str, name: str, source: Source) -> str | None:
    """Registers the consumer of a fanOut StreamConsumer (idempotent); its ARN, or None
    for any other source."""
    if not uses_fan_out(source):
        return None
    assert source.kinesis is not None, "uses_fan_out checked it"
    consumers = stream_consumers(source.kinesis)
    return await asyncio.to_thread(consumers.register, consumer_name(namespace, name))


async def deregister(namespace: str, name: str, source: Source) -> None:
    """Deregisters the consumer a fanOut spec registered (gone already is fine)."""
    if not uses_fan_out(source):
        return
    assert source.kinesis is not None, "uses_fan_out checked it"
    consumers = stream_consumers(source.kinesis)
    await asyncio.to_thread(consumers.deregister, consumer_name(namespace, name))


async def consumer_changed(
    namespace: str, name: str, old: dict[str, Any], new: dict[str, Any]
) -> str | None:
    """`spec.source` went from `old` to `new`: register for fanOut, deregister leaving it
    (or leaving its stream for another one)."""
    before = Source.model_validate(old)
    after = Source.model_validate(new)
    if not uses_fan_out(after):
        await deregister(namespace, name, before)
        return None
    arn = await register(namespace, name, after)
    if uses_fan_out(before):
        await _deregister_unless(namespace, name, before, keep=arn)
    return arn


async def _deregister_unless(namespace: str, name: str, source: Source, keep: str | None) -> None:
    """Deregisters the consumer `source` names unless it is `keep`: a changed endpoint
    or spelling (name for ARN) may still name the stream registered on just now, and
    only the consumers' ARNs tell. The new one is registered first, so the workers'
    subscriptions move on while the old one goes."""
    assert source.kinesis is not None, "only fanOut sources register"
    consumers = stream_consumers(source.kinesis)
    consumer = consumer_name(namespace, name)
    old = await asyncio.to_thread(consumers.consumer_arn, consumer)
    if old is not None and old != keep:
        await asyncio.to_thread(consumers.deregister, consumer)
