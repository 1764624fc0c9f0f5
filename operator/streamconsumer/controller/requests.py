"""A pause, a resume or a reset asked for on a StreamConsumer: recorded with who asked
(`streamconsumer.audit`) in status and in an Event, then the requester annotation that
came with it removed (docs/security.md#audit)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller import executors
from streamconsumer.controller.owned import KUBERNETES_TIMEOUT_SECONDS
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.resource import REQUESTED_BY
from streamconsumer.resets import describe


def pause_event(paused: bool, by: str) -> tuple[str, str]:
    """The Event's reason and message."""
    if paused:
        return "Paused", f"paused by {by}: workers hand their shards off"
    return "Resumed", f"resumed by {by}"


def reset_event(request_id: str, to: Any, by: str) -> tuple[str, str]:
    return "ResetRequested", f"reset {request_id} to {describe(to)} asked by {by}"


async def forget_requester(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Removes the requester annotation once seen, so that a later change by someone else
    is never taken for theirs. Only the value we read: a newer request's stays. Raises
    on any failure but that one (or the object gone), to be tried again."""
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(REQUESTED_BY)
    if value is None:
        return
    path = "/metadata/annotations/" + REQUESTED_BY.replace("~", "~0").replace("/", "~1")
    patch = [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
    metadata = body["metadata"]
    call = functools.partial(
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object,
        GROUP,
        VERSION,
        metadata["namespace"],
        PLURAL,
        metadata["name"],
        patch,
        _content_type="application/json-patch+json",  # a list alone is sent as a merge
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
    try:
        await executors.run_in(executors.KUBERNETES, call)
    except ApiException as error:
        # 422: another request replaced it (theirs to record); 404: deleted. Either way
        # nothing of ours is left to remove. Anything else: tried again by the caller.
        if error.status not in (404, 422):
            raise
