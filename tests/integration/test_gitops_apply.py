"""What docs/gitops.md tells GitOps users, shown on the real apiserver (issue 42): a Git
copy applied server-side (as Flux does, and Argo CD with ServerSideApply) keeps what an
HPA or KEDA scaled and what `streamconsumer pause` set, as long as the Git copy leaves
those fields out; a Git copy that names them puts its own values back at each sync."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from streamconsumer.models import GROUP, PLURAL, VERSION
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.specs import consumer_manifest

SYNC = "kustomize-controller"  # Flux's field manager
HPA = "horizontal-pod-autoscaler"  # the HPA controller's, through the scale subresource
CLI = "streamconsumer-cli"


def sync(plane: ControlPlane, namespace: str, git_copy: dict[str, Any]) -> None:
    """One GitOps sync: server-side apply of the Git copy, forcing conflicts as Flux does."""
    applied = plane.kubectl(
        "apply", "-n", namespace, "--server-side", f"--field-manager={SYNC}",
        "--force-conflicts", "-f", "-",
        input=yaml.safe_dump(git_copy),
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr


def scaled_by_hpa(api_client: k8s.ApiClient, namespace: str, name: str, replicas: int) -> None:
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": {"replicas": replicas}},
        field_manager=HPA,
    )  # fmt: skip


def paused_by_cli(api_client: k8s.ApiClient, namespace: str, name: str, paused: bool) -> None:
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": {"paused": paused}}, field_manager=CLI
    )


# (the field, Git's value when Git names it, who changes it between syncs, to what)
Setter = Callable[[k8s.ApiClient, str, str, Any], None]
CHANGES: dict[str, tuple[str, Any, Setter, Any]] = {
    "replicas": ("replicas", 2, scaled_by_hpa, 5),
    "paused": ("paused", False, paused_by_cli, True),
}


@pytest.mark.parametrize("git_names_it", [False, True])
@pytest.mark.parametrize("change", CHANGES)
def test_a_sync_keeps_what_another_set_only_when_git_leaves_the_field_out(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, change: str,
    git_names_it: bool,
) -> None:  # fmt: skip
    field, in_git, changed_by, changed_to = CHANGES[change]
    git_copy = consumer_manifest()
    if git_names_it:
        git_copy["spec"][field] = in_git
    sync(control_plane, namespace, git_copy)
    changed_by(api_client, namespace, "clicks", changed_to)
    sync(control_plane, namespace, git_copy)
    found = StreamConsumers(api_client, namespace).get("clicks")["spec"].get(field)
    # Named in Git, the sync puts Git's value back (it fights the HPA, undoes the pause).
    assert found == (in_git if git_names_it else changed_to), json.dumps(found)
