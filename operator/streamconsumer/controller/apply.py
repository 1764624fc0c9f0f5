"""Server-side apply, as every whole-object write of ours goes: the field managers by
name (the audit reads who asked for a change from them: audit.py), the content type,
and ownership taken from whoever held a field before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

OPERATOR = "streamconsumer-operator"
# spec.replicas alone, so `kubectl scale` or an HPA and the lag autoscaler take turns.
AUTOSCALER = "streamconsumer-autoscaler"
CLI = "streamconsumer-cli"  # spec.paused (pause, resume) and checkpoints import
CLI_RESET = "streamconsumer-cli-reset"  # the reset request
CONTENT_TYPE = "application/apply-patch+yaml"

Answer = TypeVar("Answer")


def apply(
    patch: Callable[..., Answer],
    name: str,
    namespace: str,
    body: Any,
    *,
    manager: str,
    force: bool = True,
    **options: Any,
) -> Answer:
    """`patch` (a client's `patch_namespaced_*`) as a server-side apply of `body` by
    `manager`; `options` are the client's own (`_request_timeout`)."""
    return patch(
        name,
        namespace,
        body,
        field_manager=manager,
        force=force,
        _content_type=CONTENT_TYPE,
        **options,
    )
