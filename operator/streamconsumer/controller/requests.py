"""A pause, a resume or a reset asked for on a StreamConsumer: recorded with who asked
(`streamconsumer.audit`) in status and in an Event, then the requester annotation that
came with it removed (docs/security.md#audit)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller import executors
from streamconsumer.controller.workloads.owned import KUBERNETES_TIMEOUT_SECONDS
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.resource import REQUESTED_BY
from streamconsumer.resets import describe

MAX_ATTEMPTS = 5  # reads and removals in one go, each lost only to a change meanwhile


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
    if value is not None:
        metadata = body["metadata"]
        call = functools.partial(
            _forget, api_client, metadata["namespace"], metadata["name"], str(value)
        )
        await executors.run_in(executors.KUBERNETES, call)


class StillChanging(Exception):
    """The object changed under each attempt: tried again later."""


def _forget(api_client: k8s.ApiClient, namespace: str, name: str, value: str) -> None:
    # Compared here, not in a JSON patch's `test`: the apiserver compares that by its raw
    # bytes, and this client escapes every non-ASCII character ('josé' never matched).
    # The removal then carries the resourceVersion read: a change meanwhile is a 409.
    api = k8s.CustomObjectsApi(api_client)
    where = (GROUP, VERSION, namespace, PLURAL, name)
    for _ in range(MAX_ATTEMPTS):
        try:
            current = cast(
                dict[str, Any],
                api.get_namespaced_custom_object(
                    *where, _request_timeout=KUBERNETES_TIMEOUT_SECONDS
                ),
            )
        except ApiException as error:
            if error.status == 404:
                return  # deleted: nothing left to remove
            raise
        metadata = current.get("metadata") or {}
        if (metadata.get("annotations") or {}).get(REQUESTED_BY) != value:
            return  # gone, or a newer request's: theirs to record
        patch = {
            "metadata": {
                "resourceVersion": metadata.get("resourceVersion"),
                "annotations": {REQUESTED_BY: None},
            }
        }
        try:
            api.patch_namespaced_custom_object(
                *where,
                patch,
                _content_type="application/merge-patch+json",
                _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
            )
            return
        except ApiException as error:
            if error.status == 404:
                return
            if error.status != 409:
                raise
    raise StillChanging(f"{namespace}/{name}: {REQUESTED_BY} not removed, tried again")
