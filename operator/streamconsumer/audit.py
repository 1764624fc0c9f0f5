"""Who asked for a pause, a resume or a reset (docs/security.md#audit), read from the
object as the apiserver stored it; pure.

The apiserver keeps no requester on an object, only `managedFields`: which field
manager (a client's name, such as kubectl-patch or argocd-controller) last wrote each
field. `streamconsumer pause|resume|reset` also writes the requester's user name, from
a SelfSubjectReview, in `REQUESTED_BY`, in the same request; the chart's admission
policy refuses that annotation unless it names the requester, and refuses a change of
`spec.paused` or of the reset request while it names someone else. The operator removes
it once it has recorded it, so it never outlives the request it came with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from streamconsumer.models.resource import REQUESTED_BY, RESET_ANNOTATION, ResetRequest
from streamconsumer.sources.aws import summary

PAUSED_FIELD = ("spec", "paused")
RESET_FIELD = ("metadata", "annotations", RESET_ANNOTATION)
_REQUESTED_BY_FIELD = ("metadata", "annotations", REQUESTED_BY)
MAX_REQUESTER = 253  # what status and Events carry of a name a client wrote


def asked_by(body: Mapping[str, Any], field: Sequence[str]) -> str:
    """The user who last wrote `field` where the same write named them in
    `REQUESTED_BY`; else the field manager that wrote it; else "unknown"."""
    metadata = body.get("metadata") or {}
    writer = _writer_of(metadata.get("managedFields") or [], field)
    if writer is None:
        return "unknown"
    claimed = (metadata.get("annotations") or {}).get(REQUESTED_BY)
    if claimed and _owns(writer.get("fieldsV1") or {}, _REQUESTED_BY_FIELD):
        return summary(str(claimed), MAX_REQUESTER)
    return f"field manager {summary(str(writer.get('manager') or 'unnamed'), MAX_REQUESTER)}"


def _writer_of(
    entries: Sequence[Mapping[str, Any]], field: Sequence[str]
) -> Mapping[str, Any] | None:
    # One field has one owner per apply, but several updaters may share it: the latest.
    owners = [e for e in entries if _owns(e.get("fieldsV1") or {}, field)]
    return max(owners, key=lambda e: str(e.get("time") or ""), default=None)


def _owns(fields: Mapping[str, Any], path: Sequence[str]) -> bool:
    node: Any = fields
    for step in path:
        if not isinstance(node, Mapping) or f"f:{step}" not in node:
            return False
        node = node[f"f:{step}"]
    return True


def reset_request(body: Mapping[str, Any]) -> ResetRequest | None:
    """The reset asked for on the object, with who asked (whatever its JSON claims);
    raises ValidationError if the request is bad."""
    request = ResetRequest.on(body)
    if request is None:
        return None
    return request.model_copy(update={"requested_by": asked_by(body, RESET_FIELD)})


def pause_requester(body: Mapping[str, Any]) -> str:
    """Who paused a paused consumer, as a new term finds it: a request not recorded yet
    names its user; else the status keeps who it was; else whoever wrote the field."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    recorded = (body.get("status") or {}).get("pausedBy")
    if REQUESTED_BY not in annotations and recorded:
        return str(recorded)
    return asked_by(body, PAUSED_FIELD)
