"""Who asked (docs/security.md#audit), on the real apiserver's managedFields: requests of
several users through `streamconsumer pause|resume|reset` (cli.ask), each user by
impersonation, read back as the operator reads them (streamconsumer/audit.py), in the
moments before it removes the requester annotation (it is slow, restarting, or down);
and a hostile annotation on the real operator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from streamconsumer import audit, cli
from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.status import Conflict
from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL
from streamconsumer.models.resource import (
    REQUESTED_BY,
    RESET_ANNOTATION,
    ResetPosition,
    ResetRequest,
)
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.specs import consumer_manifest
from testbed.waiting import wait_for

USERS = ("alice", "bob")
NAME = "audited"


@pytest.fixture
def as_user(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> Iterator[dict[str, k8s.CustomObjectsApi]]:
    """A client per user, each allowed to edit StreamConsumers in the namespace."""
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rule = k8s.V1PolicyRule(api_groups=[GROUP], resources=[PLURAL], verbs=["get", "patch"])
    rbac.create_namespaced_role(
        namespace, k8s.V1Role(metadata=k8s.V1ObjectMeta(name="consumers"), rules=[rule])
    )
    subjects = [
        k8s.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")
        for user in USERS
    ]
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name="consumers"),
            role_ref=k8s.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="consumers"
            ),
            subjects=subjects,
        ),
    )
    clients: dict[str, k8s.ApiClient] = {}
    for user in USERS:
        client: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(control_plane.kubeconfig)
        )
        client.set_default_header("Impersonate-User", user)  # type: ignore[no-untyped-call]
        clients[user] = client
    StreamConsumers(api_client, namespace).create(consumer_manifest(NAME))
    yield {user: k8s.CustomObjectsApi(client) for user, client in clients.items()}
    for client in clients.values():
        client.close()  # type: ignore[no-untyped-call]


def reset_patch(request_id: str) -> dict[str, Any]:
    request = ResetRequest(id=request_id, to=ResetPosition())
    return {"metadata": {"annotations": {RESET_ANNOTATION: request.model_dump_json(by_alias=True)}}}


def test_a_reset_names_its_requester_for_the_reset_only_never_for_an_earlier_pause(
    api_client: k8s.ApiClient, namespace: str, as_user: dict[str, k8s.CustomObjectsApi]
) -> None:
    """Found by review: the CLI wrote every request as one field manager, so bob's reset
    left the entry that wrote alice's `spec.paused` owning bob's name, and the operator
    (a new term, or a cycle that saw both) recorded the pause as bob's. With the
    admission policy too: bob's name was his own."""
    cli.ask(as_user["alice"], namespace, NAME, {"spec": {"paused": True}})
    paused = StreamConsumers(api_client, namespace).get(NAME)
    assert audit.asked_by(paused, audit.PAUSED_FIELD) == "alice"

    cli.ask(as_user["bob"], namespace, NAME, reset_patch("r1"))
    both = StreamConsumers(api_client, namespace).get(NAME)
    assert audit.asked_by(both, audit.RESET_FIELD) == "bob"
    assert "bob" not in audit.asked_by(both, audit.PAUSED_FIELD), "bob never paused"
    assert "bob" not in audit.pause_requester(both), "nor as a new term finds it"


def test_a_status_write_between_the_request_and_its_handling_keeps_the_requester(
    api_client: k8s.ApiClient, namespace: str, as_user: dict[str, k8s.CustomObjectsApi]
) -> None:
    """Found by a red CI run: the operator replaces status (a PUT of /status whose
    metadata carries no annotations), and the apiserver, which keeps the stored
    annotations, still counts them as taken from their owners. A status write landing
    between alice's pause and its handling left her name standing but owned by no one,
    and the pause was recorded as the CLI's field manager's."""
    cli.ask(as_user["alice"], namespace, NAME, {"spec": {"paused": True}})
    paused = StreamConsumers(api_client, namespace).get(NAME)
    status_api = KubeStatusApi(api_client, namespace, NAME)
    write = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "resourceVersion": paused["metadata"]["resourceVersion"],
        },
        "spec": paused["spec"],
        "status": {"observedGeneration": 1, "pausedBy": "someone"},
    }
    status_api.replace_status(write)
    written = StreamConsumers(api_client, namespace).get(NAME)
    assert written["metadata"]["annotations"][REQUESTED_BY] == "alice"
    assert audit.asked_by(written, audit.PAUSED_FIELD) == "alice"
    assert audit.pause_requester(written) == "alice"
    # Still a replacement of status, conditional on the resourceVersion it was read at.
    write["status"] = {"observedGeneration": 2}
    with pytest.raises(Conflict):
        status_api.replace_status(write)
    write["metadata"]["resourceVersion"] = written["metadata"]["resourceVersion"]
    replaced = status_api.replace_status(write)["status"]
    assert replaced["observedGeneration"] == 2
    assert "pausedBy" not in replaced


def test_a_request_whose_user_is_unknown_carries_no_earlier_name(
    api_client: k8s.ApiClient,
    namespace: str,
    as_user: dict[str, k8s.CustomObjectsApi],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by review: where the apiserver could not say who bob is (no
    SelfSubjectReview), his resume left alice's name standing, owned by the CLI's field
    manager that also wrote his `spec.paused`: the resume was recorded as alice's."""
    cli.ask(as_user["alice"], namespace, NAME, {"spec": {"paused": True}})
    monkeypatch.setattr(cli, "whoami", lambda api_client: None)
    cli.ask(as_user["bob"], namespace, NAME, {"spec": {"paused": False}})
    resumed = StreamConsumers(api_client, namespace).get(NAME)
    assert "alice" not in audit.asked_by(resumed, audit.PAUSED_FIELD), "alice never resumed"


def test_a_huge_annotation_neither_wedges_the_operator_nor_reaches_status(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Found by review: kopf keeps the last handled state of the object, annotations
    included, in one annotation of the object (at most 256 KiB for all). With a 200 KB
    requester annotation (any value passes without the admission policy), or any other
    one, that state no longer fits: every handling of the object failed with a 422, the
    pause was never applied, recorded nor removed, and nothing said so but the
    operator's log."""
    consumers = StreamConsumers(api_client, namespace)
    blob = {"annotations": {"example.com/blob": "b" * 100_000}}
    consumers.create(consumer_manifest(NAME, metadata=blob))
    operator = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    try:
        hostile = ("x\n\x1b[31m\u202eevil\u200b" * 20_000)[:120_000]
        consumers.patch(
            NAME,
            {"spec": {"paused": True}, "metadata": {"annotations": {REQUESTED_BY: hostile}}},
        )

        def recorded() -> bool:
            body = consumers.get(NAME)
            return bool((body.get("status") or {}).get("pausedBy")) and REQUESTED_BY not in (
                body["metadata"].get("annotations") or {}
            )

        wait_for(recorded, 30, "the pause recorded and the name removed")
        paused_by = consumers.get(NAME)["status"]["pausedBy"]
        assert len(paused_by) <= audit.MAX_REQUESTER
        assert paused_by.isprintable()
        events = k8s.CoreV1Api(api_client).list_namespaced_event(
            namespace, field_selector="reason=Paused"
        )
        assert [len(e.message or "") < 400 for e in events.items] == [True]
    finally:
        operator.stop()


def test_a_non_ascii_requester_is_removed_once_recorded(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Found by review: the removal tested the annotation's value in a JSON patch, and the
    apiserver compares a `test` value by its bytes: the client sends 'é' escaped
    ('\\u00e9'), the object holds it raw, so for any name beyond ASCII (an OIDC user
    'josé') the test failed, the 422 was taken for "a newer request's", and the name
    stood for good (with the admission policy, refusing everyone else's pause)."""
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer_manifest(NAME))
    operator = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    try:
        for user in ("josé", "名前", "plain"):
            paused = not (consumers.get(NAME)["spec"].get("paused") or False)
            patch = {"spec": {"paused": paused}, "metadata": {"annotations": {REQUESTED_BY: user}}}
            consumers.patch(NAME, patch)

            def removed() -> bool:
                annotations = consumers.get(NAME)["metadata"].get("annotations") or {}
                return REQUESTED_BY not in annotations

            wait_for(removed, 30, f"{user}'s name removed once recorded")
    finally:
        operator.stop()
