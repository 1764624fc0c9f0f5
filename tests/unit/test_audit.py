"""Who asked for a pause or a reset, read from managedFields and the requester
annotation (streamconsumer/audit.py)."""

from __future__ import annotations

from typing import Any

from streamconsumer import audit
from streamconsumer.models.resource import REQUESTED_BY, RESET_ANNOTATION

PAUSED: dict[str, Any] = {"f:spec": {"f:paused": {}}}
NAMED: dict[str, Any] = {"f:metadata": {"f:annotations": {f"f:{REQUESTED_BY}": {}}}}


def merged(into: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    for key, value in part.items():
        merged(into.setdefault(key, {}), value)
    return into


def entry(manager: str, time: str, *fields: dict[str, Any]) -> dict[str, Any]:
    owned: dict[str, Any] = {}
    for part in fields:
        merged(owned, part)
    return {"manager": manager, "operation": "Update", "time": time, "fieldsV1": owned}


def body(*entries: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"managedFields": list(entries), "annotations": annotations},
        "spec": {"paused": True},
    }


def test_the_requester_is_named_only_by_the_write_that_made_the_change() -> None:
    cli = entry("streamconsumer-cli", "2026-11-26T10:00:00Z", PAUSED, NAMED)
    assert audit.asked_by(body(cli, **{REQUESTED_BY: "alice"}), audit.PAUSED_FIELD) == "alice"

    # bob's kubectl patch of spec.paused alone, after alice's name was written by another
    # manager: the field's writer is kubectl-patch, and alice is not taken for it.
    named_by_cli = entry("streamconsumer-cli", "2026-11-26T10:00:00Z", NAMED)
    patched = entry("kubectl-patch", "2026-11-26T10:05:00Z", PAUSED)
    later = body(named_by_cli, patched, **{REQUESTED_BY: "alice"})
    assert audit.asked_by(later, audit.PAUSED_FIELD) == "field manager kubectl-patch"


def test_without_a_requester_the_field_manager_answers_and_nothing_is_unbounded() -> None:
    argo = entry("argocd-controller", "2026-11-26T10:00:00Z", PAUSED)
    assert audit.asked_by(body(argo), audit.PAUSED_FIELD) == "field manager argocd-controller"
    assert audit.asked_by(body(), audit.PAUSED_FIELD) == "unknown"
    hostile = entry("x" * 5000 + "\n\x1b[31m", "2026-11-26T10:00:00Z", PAUSED)
    named = audit.asked_by(body(hostile), audit.PAUSED_FIELD)
    assert len(named) <= len("field manager ") + audit.MAX_REQUESTER
    assert "\n" not in named
    assert "\x1b" not in named


def test_a_reset_carries_its_requester_whatever_its_json_claims() -> None:
    request = '{"id": "r1", "to": {"timestamp": null}, "requestedBy": "mallory"}'
    reset: dict[str, Any] = {"f:metadata": {"f:annotations": {f"f:{RESET_ANNOTATION}": {}}}}
    cli = entry("streamconsumer-cli", "2026-11-26T10:00:00Z", reset, NAMED)
    asked = audit.reset_request(body(cli, **{RESET_ANNOTATION: request, REQUESTED_BY: "alice"}))
    assert asked is not None
    assert asked.requested_by == "alice"
    assert "requestedBy" not in asked.model_dump_json(by_alias=True)


def test_a_new_term_keeps_who_paused_unless_a_newer_request_names_someone() -> None:
    cli = entry("streamconsumer-cli", "2026-11-26T10:00:00Z", PAUSED)
    recorded = body(cli) | {"status": {"pausedBy": "alice"}}
    assert audit.pause_requester(recorded) == "alice"
    named = entry("streamconsumer-cli", "2026-11-26T10:09:00Z", PAUSED, NAMED)
    newer = body(named, **{REQUESTED_BY: "bob"}) | {"status": {"pausedBy": "alice"}}
    assert audit.pause_requester(newer) == "bob"
