"""What every kopf handler of this process shares, typed and built once at start-up by
the entry point (`__main__.py`); kopf's untyped memo only carries it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client as k8s

from streamconsumer.controller.certificates.ca_upkeep import CaBundles
from streamconsumer.controller.certificates.serving import Serving
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.worker_api.auth import TokenReviewer
from streamconsumer.core.token_bucket import TokenBucket


@dataclass(frozen=True)
class OperatorContext:
    config: OperatorConfig
    api_client: k8s.ApiClient
    registry: Registry
    reviewer: TokenReviewer
    tls: Serving | None
    # Which CA each consumer's CA ConfigMap was last given (the reconcile and the upkeep).
    ca_bundles: CaBundles
    # Unique to this process: the status' term fence names it (two lives never share one).
    holder: str
    # Does this replica lead right now (its election term is running)?
    leading: Callable[[], bool]
    # Ends this replica's term for good: a newer term fenced a consumer's status.
    deposed: Callable[[str], None]
    stop_serving: Callable[[], Awaitable[None]]
    # Frees the Lease once no consumer loop can write any more (a rolling upgrade).
    step_down: Callable[[], Awaitable[None]]
    # Backlog probes of every consumer together (config.backlog_probes_per_second).
    probes: TokenBucket


def context_of(memo: Any) -> OperatorContext:
    context = memo.context
    assert isinstance(context, OperatorContext), "built by streamconsumer.controller"
    return context


def memo_for(context: OperatorContext) -> kopf.Memo:
    return kopf.Memo(context=context)
