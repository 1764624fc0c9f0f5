"""The status tells the truth (issue 25) on the real operator and apiserver: when the
workers' objects cannot be applied, Ready is False with the apiserver's reason, and
`kubectl get stc` (not "sc": that is StorageClasses) shows it."""

from __future__ import annotations

import functools
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.specs import consumer_manifest
from testbed.waiting import wait_for

# A valid StreamConsumer name, but too long for the label that selects its workers
# (label values stop at 63 characters): the apiserver refuses the workers' objects.
LONG_NAME = "clicks-" + "x" * 70


def test_workers_objects_the_apiserver_refuses_make_ready_false_with_its_reason(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer_manifest(LONG_NAME))

    def refused() -> bool:
        applied = consumers.conditions(LONG_NAME).get("ChildrenApplied", {})
        return applied.get("status") == "False" and applied.get("reason") == "Refused"

    wait_for(refused, 60, "ChildrenApplied False")
    found = consumers.conditions(LONG_NAME)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "ChildrenNotApplied")
    assert "was refused (422)" in found["Ready"]["message"]
    assert "must be no more than 63" in found["Ready"]["message"], "the apiserver's words"
    assert found["Stalled"]["status"] == "True"

    shown = control_plane.kubectl("-n", namespace, "get", "stc", LONG_NAME)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    ready, reason, age = (header.index(column) for column in ("READY", "REASON", "AGE"))
    assert row[ready:reason].strip() == "False", shown.stdout
    assert row[reason:age].strip() == "ChildrenNotApplied", shown.stdout


def test_children_applied_is_not_claimed_for_a_spec_whose_objects_fail_to_apply(
    api_client: k8s.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    """Found by review: only a refusal (400, 403, 422) reached the status. An apply that
    failed otherwise (here a validating webhook that is down: the apiserver answers 500,
    for as long as it is down) left the last outcome, so the next status write claimed
    ChildrenApplied True, at the new generation, for a Deployment still on the old
    image."""
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(consumer_manifest())
    wait_for(
        lambda: consumers.conditions("clicks").get("ChildrenApplied", {}).get("status") == "True",
        60,
        "the workers' objects applied",
    )
    webhooks = k8s.AdmissionregistrationV1Api(api_client)
    down = k8s.V1ValidatingWebhookConfiguration(
        metadata=k8s.V1ObjectMeta(name=f"down-{namespace}"),
        webhooks=[
            k8s.V1ValidatingWebhook(
                name="down.example.com",
                admission_review_versions=["v1"],
                side_effects="None",
                failure_policy="Fail",
                timeout_seconds=1,
                client_config=k8s.AdmissionregistrationV1WebhookClientConfig(
                    url="https://127.0.0.1:1/validate"
                ),
                namespace_selector=k8s.V1LabelSelector(
                    match_labels={"kubernetes.io/metadata.name": namespace}
                ),
                rules=[
                    k8s.V1RuleWithOperations(
                        api_groups=["apps"],
                        api_versions=["v1"],
                        operations=["CREATE", "UPDATE"],
                        resources=["deployments"],
                    )
                ],
            )
        ],
    )
    webhooks.create_validating_webhook_configuration(down)
    try:
        apps = k8s.AppsV1Api(api_client)

        def webhook_called() -> bool:  # a new webhook takes a moment to be loaded
            try:
                apps.patch_namespaced_deployment(
                    "clicks-workers", namespace, {"metadata": {}}, dry_run="All"
                )
            except ApiException as error:
                return bool(error.status == 500)
            return False

        wait_for(webhook_called, 30, "the webhook in force")
        consumers.patch("clicks", {"spec": {"processor": {"image": "example/clicks:2"}}})
        consumers.patch("clicks", {"spec": {"paused": True}})  # a status write follows
        generation = consumers.get("clicks")["metadata"]["generation"]

        def failing_shown() -> bool:
            applied = consumers.conditions("clicks").get("ChildrenApplied", {})
            return applied.get("status") == "False" and "500" in applied.get("message", "")

        wait_for(failing_shown, 60, "the failing apply, in the apiserver's words")
        pod = apps.read_namespaced_deployment("clicks-workers", namespace).spec.template.spec
        assert pod is not None
        assert pod.containers[0].image == "example/clicks:1", "not applied"
        status = consumers.get("clicks")["status"]
        # Nor observed: Flux and Argo CD wait (issue 42), the apply being tried again.
        assert status.get("observedGeneration") != generation, status
        reconciling = consumers.conditions("clicks")["Reconciling"]
        assert (reconciling["status"], reconciling["reason"]) == ("True", "ApplyingChildren")
    finally:
        webhooks.delete_validating_webhook_configuration(f"down-{namespace}")


def test_a_change_made_while_the_operator_handles_the_previous_one_is_not_lost(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Found by review: kopf runs one handler per event ('asap'), and at the end of the
    cycle stores the newest state as handled. Since a pause also runs `pause_changed`
    and `requester_named` after `reconcile_children`, a change that lands between them
    (here: a pause just as the operator starts, or an image change just after a pause)
    was taken as handled though `reconcile_children` never saw it: the loop was never
    told it was paused (workers went on processing, Ready said nothing), and the
    Deployment kept the old image."""
    consumers = StreamConsumers(api_client, namespace)
    apps = k8s.AppsV1Api(api_client)
    for name in ("first", "second"):
        consumers.create(consumer_manifest(name))
    process = OperatorProcess(control_plane.kubeconfig, namespace, tmp_path / "operator").start()
    try:
        consumers.patch("first", {"spec": {"paused": True}})  # while its creation is handled

        def ready_reason(name: str) -> str | None:
            return consumers.conditions(name).get("Ready", {}).get("reason")

        wait_for(lambda: ready_reason("first") == "Paused", 30, "the loop told of the pause")

        def has_image(name: str, wanted: str) -> bool:
            try:
                pod = apps.read_namespaced_deployment(f"{name}-workers", namespace).spec.template
            except ApiException:
                return False
            return pod.spec is not None and pod.spec.containers[0].image == wanted

        wait_for(functools.partial(has_image, "second", "example/clicks:1"), 30, "workers made")
        for attempt in range(5):  # the window is a few milliseconds: try it a few times
            wanted = f"example/clicks:{attempt}"
            consumers.patch("second", {"spec": {"paused": attempt % 2 == 0}})
            consumers.patch("second", {"spec": {"processor": {"image": wanted}}})
            wait_for(functools.partial(has_image, "second", wanted), 30, f"{wanted} applied")
    finally:
        process.stop()
