"""Creating and updating the objects a StreamConsumer owns, and never any other.

A tenant may name a StreamConsumer after an object that already exists, say a
ServiceAccount `<name>-worker` bound to roles or to an IAM role: applying over it with
force and adopting it would hand its rights to the tenant's workers, and delete it
with the StreamConsumer. So an object is applied with force only while its controller
reference is this StreamConsumer (its uid in the patch: the apply fails if the object
was replaced meanwhile), and without force where none was read. What that leaves: an
object created in the milliseconds between our read and our apply, by someone who may
create it anyway, is merged into unless a field of it conflicts with ours or it has a
controller of its own. Anything else not ours is `NotOurs`, left untouched
(docs/security.md#ownership)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.apply import OPERATOR, apply
from streamconsumer.sources.aws import summary

REFUSALS = (400, 403, 422)  # the object or our right to it: not a passing fault
KUBERNETES_TIMEOUT_SECONDS = 10.0


class NotOurs(Exception):
    """An object of the name we need exists and is not this StreamConsumer's."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(
            f"{kind} {name} exists and is not this StreamConsumer's: it is left untouched; "
            f"delete or rename it, or rename the StreamConsumer"
        )
        self.kind = kind
        self.name = name


class NotApplied(Exception):
    """The apiserver refused an object of ours (invalid, or an admission policy said no):
    its words, for the StreamConsumer's status. Retrying as it is would not help."""

    def __init__(self, kind: str, name: str, error: ApiException) -> None:
        super().__init__(f"{kind} {name} was refused ({error.status}): {api_message(error)}")


JSON_PATCH = "application/json-patch+json"


def replacing(version: str, path: str, value: Any) -> list[dict[str, Any]]:
    """A JSON patch that sets `path` to `value` if the object is still at `version` (409
    if it moved), leaving the rest as stored: unlike a PUT of a bare object, it takes no
    label or annotation away, nor its owner in managedFields."""
    return [
        {"op": "add", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": path, "value": value},  # `add` replaces a member that exists
    ]


def api_message(error: ApiException) -> str:
    """The apiserver's own message (a Status object's `message`), else its reason."""
    try:
        return summary(str(json.loads(error.body or "").get("message") or error.reason), 1000)
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)


def failure(error: BaseException) -> str:
    """A failed apply's passing fault, for status: the apiserver's bounded words, else
    the kind of fault only (a client error's text may quote anything)."""
    if isinstance(error, ApiException):
        return f"HTTP {error.status}: {api_message(error)}"
    return type(error).__name__


@dataclass(frozen=True)
class _Verbs:
    read: Callable[..., Any]
    patch: Callable[..., Any]
    delete: Callable[..., Any]


def _verbs(api_client: k8s.ApiClient, kind: str) -> _Verbs:
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    policy = k8s.PolicyV1Api(api_client)
    return {
        "Deployment": _Verbs(
            apps.read_namespaced_deployment,
            apps.patch_namespaced_deployment,
            apps.delete_namespaced_deployment,
        ),
        "ConfigMap": _Verbs(
            core.read_namespaced_config_map,
            core.patch_namespaced_config_map,
            core.delete_namespaced_config_map,
        ),
        "ServiceAccount": _Verbs(
            core.read_namespaced_service_account,
            core.patch_namespaced_service_account,
            core.delete_namespaced_service_account,
        ),
        "PodDisruptionBudget": _Verbs(
            policy.read_namespaced_pod_disruption_budget,
            policy.patch_namespaced_pod_disruption_budget,
            policy.delete_namespaced_pod_disruption_budget,
        ),
    }[kind]


def controlled_by(owners: list[Any] | None, owner_uid: str) -> bool:
    return any(o.controller and o.uid == owner_uid for o in owners or [])


def _read(verbs: _Verbs, name: str, namespace: str) -> Any | None:
    """The object `name` as the client models it; None if there is none. Raises
    ApiException."""
    try:
        return verbs.read(name, namespace, _request_timeout=KUBERNETES_TIMEOUT_SECONDS)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _ours(verbs: _Verbs, name: str, namespace: str, owner_uid: str) -> Any | None:
    """The object `name` if its controller reference is this owner; None if it is
    missing or not ours. Raises ApiException."""
    existing = _read(verbs, name, namespace)
    if existing is None or not controlled_by(existing.metadata.owner_references, owner_uid):
        return None
    return existing


def apply_owned(
    api_client: k8s.ApiClient, manifest: dict[str, Any], namespace: str, owner_uid: str
) -> None:
    """Creates `manifest` (which carries its owner reference) or brings ours up to date;
    raises NotOurs, or ApiException (a conflict is retried by the caller)."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    verbs = _verbs(api_client, kind)
    existing = _read(verbs, name, namespace)
    if existing is not None and not controlled_by(existing.metadata.owner_references, owner_uid):
        raise NotOurs(kind, name)
    if existing is not None:
        manifest = {**manifest, "metadata": {**manifest["metadata"], "uid": existing.metadata.uid}}
    # Server-side apply: our fields, whoever else manages others (kubectl scale, HPA).
    try:
        apply(
            verbs.patch,
            name,
            namespace,
            manifest,
            manager=OPERATOR,
            force=existing is not None,
            _request_timeout=KUBERNETES_TIMEOUT_SECONDS,
        )
    except ApiException as error:
        if error.status in REFUSALS:
            raise NotApplied(kind, name, error) from None
        raise


def read_owned(
    api_client: k8s.ApiClient, kind: str, name: str, namespace: str, owner_uid: str
) -> dict[str, Any] | None:
    """`kind` `name` as the apiserver stores it (JSON's field names) if its controller
    reference is this owner; None if it is missing or not ours. Raises ApiException."""
    verbs = _verbs(api_client, kind)
    try:  # the JSON itself: the client's models and their serialization cost 4x the read
        raw = verbs.read(
            name, namespace, _preload_content=False, _request_timeout=KUBERNETES_TIMEOUT_SECONDS
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    existing = json.loads(raw.data)
    owners = (existing.get("metadata") or {}).get("ownerReferences") or []
    if not any(o.get("controller") and o.get("uid") == owner_uid for o in owners):
        return None
    return dict(existing)


def delete_owned(
    api_client: k8s.ApiClient, kind: str, name: str, namespace: str, owner_uid: str
) -> bool:
    """Deletes `kind` `name` if its controller reference is this owner (the uid read as
    a precondition: a replacement is not deleted); never another's. True if it did."""
    verbs = _verbs(api_client, kind)
    existing = _ours(verbs, name, namespace, owner_uid)
    if existing is None:
        return False
    options = k8s.V1DeleteOptions(
        preconditions=k8s.V1Preconditions(uid=existing.metadata.uid),
        propagation_policy="Background",  # its ReplicaSets and pods go too
    )
    try:
        verbs.delete(name, namespace, body=options, _request_timeout=KUBERNETES_TIMEOUT_SECONDS)
    except ApiException as error:
        if error.status in (404, 409):  # gone, or replaced meanwhile: not ours to delete
            return False
        raise
    return True
