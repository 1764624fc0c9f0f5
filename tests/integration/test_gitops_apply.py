"""What docs/gitops.md tells GitOps users, shown on the real apiserver (issue 42): a Git
copy applied server-side (as Flux does, and Argo CD with ServerSideApply) keeps what an
HPA or KEDA scaled and what `streamconsumer pause` set, as long as the Git copy leaves
those fields out; a Git copy that names them puts its own values back at each sync."""

from __future__ import annotations

import json
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


def paused_by_cli(api_client: k8s.ApiClient, namespace: str, name: str) -> None:
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": {"paused": True}}, field_manager=CLI
    )


@pytest.mark.parametrize("git_names_replicas", [False, True])
def test_a_sync_keeps_the_scaled_replicas_only_when_git_leaves_them_out(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, git_names_replicas: bool
) -> None:
    git_copy = consumer_manifest()
    if git_names_replicas:
        git_copy["spec"]["replicas"] = 2
    consumers = StreamConsumers(api_client, namespace)
    sync(control_plane, namespace, git_copy)
    scaled_by_hpa(api_client, namespace, "clicks", 5)
    sync(control_plane, namespace, git_copy)
    replicas = consumers.get("clicks")["spec"]["replicas"]
    if git_names_replicas:
        assert replicas == 2, "the sync puts Git's value back: it fights the HPA"
    else:
        assert replicas == 5, "the HPA's value stands"


@pytest.mark.parametrize("git_names_paused", [False, True])
def test_a_pause_survives_a_sync_only_when_git_leaves_paused_out(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, git_names_paused: bool
) -> None:
    git_copy = consumer_manifest()
    if git_names_paused:
        git_copy["spec"]["paused"] = False
    consumers = StreamConsumers(api_client, namespace)
    sync(control_plane, namespace, git_copy)
    paused_by_cli(api_client, namespace, "clicks")
    sync(control_plane, namespace, git_copy)
    spec = consumers.get("clicks")["spec"]
    assert spec.get("paused", False) is not git_names_paused, json.dumps(spec)
