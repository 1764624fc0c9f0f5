"""Enhanced fan-out's life cycle on the operator's side: a fanOut StreamConsumer has a
stream consumer registered (ACTIVE) while it exists, and deregistered when it is deleted
or switched back to polling. The kopf handlers in main.py call these; the registration
calls block, so they run in a thread. Which kinds fan out, and how, the kinds' table
says (`sources/registry.py`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from streamconsumer.controller import executors
from streamconsumer.controller.aws.access import AccessPolicy, AccessRefused
from streamconsumer.models.resource import Source
from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.base import ConsumerRegistration, Identity
from streamconsumer.sources.registry import selected

T = TypeVar("T")


def uses_fan_out(source: Source) -> bool:
    kind, spec = selected(source)
    return kind.fan_out is not None and kind.fan_out.uses(spec)


def stream_consumers(source: Source, identity: Identity) -> ConsumerRegistration:
    """Registration of the consumers of a fanOut source's stream, called as `identity`."""
    kind, spec = selected(source)
    assert kind.fan_out is not None, "only fanOut sources register"
    return kind.fan_out.registration(spec, identity)


def consumer_name(namespace: str, name: str, source: Source) -> str:
    kind, _ = selected(source)
    assert kind.fan_out is not None, "only fanOut sources register"
    return kind.fan_out.consumer_name(namespace, name)


class FanOutFailed(Exception):
    """A registration call failed; its text is a bounded summary of the answer."""


async def _call(call: Callable[[], T]) -> T:
    try:
        return await executors.run_in(executors.CONSUMERS, call)
    except Exception as error:  # the endpoint's words, bounded (docs/security.md#aws-access)
        code, message = aws_error(error)
        raise FanOutFailed(f"{code}: {message}" if code else message) from None


async def register(policy: AccessPolicy, namespace: str, name: str, source: Source) -> str | None:
    """Registers the consumer of a fanOut StreamConsumer (idempotent); its ARN, or None
    for any other source. Raises AccessRefused (nothing sent) or FanOutFailed."""
    if not uses_fan_out(source):
        return None
    reason = policy.refusal(namespace, source)
    if reason is not None:
        raise AccessRefused(reason)
    consumers = stream_consumers(source, policy.identity(namespace, source))
    return await _call(
        functools.partial(consumers.register, consumer_name(namespace, name, source))
    )


async def deregister(policy: AccessPolicy, namespace: str, name: str, source: Source) -> None:
    """Deregisters the consumer a fanOut spec registered (gone already is fine; a source
    the policy refuses was never registered by us)."""
    if not uses_fan_out(source) or policy.refusal(namespace, source) is not None:
        return
    consumers = stream_consumers(source, policy.identity(namespace, source))
    await _call(functools.partial(consumers.deregister, consumer_name(namespace, name, source)))


async def consumer_changed(
    policy: AccessPolicy, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any]
) -> str | None:
    """`spec.source` went from `old` to `new`: register for fanOut, deregister leaving it
    (or leaving its stream for another one)."""
    before = Source.model_validate(old)
    after = Source.model_validate(new)
    if uses_fan_out(after) and policy.refusal(namespace, after) is not None:
        await deregister(policy, namespace, name, before)  # not left registered for good
    if not uses_fan_out(after):
        await deregister(policy, namespace, name, before)
        return None
    arn = await register(policy, namespace, name, after)
    if uses_fan_out(before) and policy.refusal(namespace, before) is None:
        await _deregister_unless(policy, namespace, name, before, keep=arn)
    return arn


async def _deregister_unless(
    policy: AccessPolicy, namespace: str, name: str, source: Source, keep: str | None
) -> None:
    """Deregisters the consumer `source` names unless it is `keep`: a changed endpoint
    or spelling (name for ARN) may still name the stream registered on just now, and
    only the consumers' ARNs tell. The new one is registered first, so the workers'
    subscriptions move on while the old one goes."""
    consumers = stream_consumers(source, policy.identity(namespace, source))
    consumer = consumer_name(namespace, name, source)
    old = await _call(functools.partial(consumers.consumer_arn, consumer))
    if old is not None and old != keep:
        await _call(functools.partial(consumers.deregister, consumer))
