"""A consumer that cannot be loaded from what it stores or resumes from
(`consumers.Refused`), said where its team looks: a Warning Event, and the Stalled and
Ready conditions on its object. Only that consumer stops; every other one goes on
(docs/security.md#lease-tables)."""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller import executors
from streamconsumer.controller.workloads.owned import KUBERNETES_TIMEOUT_SECONDS
from streamconsumer.models.resource import GROUP, PLURAL, VERSION, Condition

log = logging.getLogger(__name__)

RETRY_SECONDS = 60.0  # a stalled consumer is loaded again this often: someone may mend it


def stalled_conditions(
    previous: Sequence[Mapping[str, Any]],
    reason: str,
    message: str,
    generation: int | None,
    now: datetime.datetime,
) -> list[dict[str, Any]]:
    """`previous` with Stalled true and Ready false for `reason`; the others as they were."""
    said = {"Stalled": "True", "Ready": "False"}
    kept = [dict(c) for c in previous if c.get("type") not in said]
    for type_, status in said.items():
        before = next((c for c in previous if c.get("type") == type_), {})
        since = before.get("lastTransitionTime") if before.get("status") == status else None
        condition = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            observed_generation=generation,
            last_transition_time=since or now,
        )
        kept.append(condition.model_dump(mode="json", by_alias=True))
    return kept


async def stall(api_client: k8s.ApiClient, body: kopf.Body, reason: str, message: str) -> None:
    """Says on the consumer's object why it stopped; a failure to say so is logged only
    (the daemon tries again, and says it again)."""
    kopf.warn(body, reason=reason, message=message)
    status = body.get("status") or {}
    conditions = stalled_conditions(
        status.get("conditions") or [],
        reason,
        message,
        body.get("metadata", {}).get("generation"),
        datetime.datetime.now(datetime.UTC).replace(microsecond=0),
    )
    call = functools.partial(
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        body["metadata"]["namespace"],
        PLURAL,
        body["metadata"]["name"],
        {"status": {"conditions": conditions}},
        _content_type="application/merge-patch+json",
        _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
    )
    try:
        await executors.run_in(executors.KUBERNETES, call)
    except (ApiException, HTTPError, OSError) as error:
        log.warning("%s: not said on the object (%s)", message, error)
