"""No confused deputy (issue 24): the chart's ValidatingAdmissionPolicy on the real
apiserver, with a tenant who may only edit StreamConsumers in their namespace. The
operator would create the workers' pods with its own rights; through a StreamConsumer
the tenant must get no more than they could do themselves."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from streamconsumer.models import API_VERSION, GROUP, KIND, PLURAL
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
TENANT = "alice"
BASE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "metadata": {"name": "clicks"},
    "spec": {
        "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
        "processor": {"image": "example/clicks:1", "entrypoint": "clicks:Processor"},
    },
}


def consumer(name: str = "clicks", **spec: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(BASE)
    manifest["metadata"]["name"] = name
    for part, value in spec.items():
        manifest["spec"].setdefault(part, {}).update(value)
    return manifest


@pytest.fixture(scope="module")
def admission_policy(control_plane: ControlPlane, helm: Path) -> Iterator[None]:
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "sc",
            str(REPO / "charts" / "streamconsumer"),
            "--kube-version",
            "1.34.4",
            "--show-only",
            "templates/admission-policy.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    applied = control_plane.kubectl("apply", "-f", "-", input=rendered)
    assert applied.returncode == 0, applied.stderr
    yield
    control_plane.kubectl("delete", "-f", "-", input=rendered)


@pytest.fixture
def tenant(api_client: k8s.ApiClient, namespace: str) -> str:
    """`alice` may edit StreamConsumers in the namespace, and nothing else."""
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rule = k8s.V1PolicyRule(
        api_groups=[GROUP],
        resources=[PLURAL],
        verbs=["get", "list", "watch", "create", "update", "patch", "delete"],
    )
    rbac.create_namespaced_role(
        namespace, k8s.V1Role(metadata=k8s.V1ObjectMeta(name="consumers"), rules=[rule])
    )
    bind(rbac, namespace, "consumers")
    k8s.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="db"), string_data={"password": "hunter2"}),
    )
    return namespace


def bind(rbac: k8s.RbacAuthorizationV1Api, namespace: str, role: str) -> None:
    subject = k8s.RbacV1Subject(kind="User", name=TENANT, api_group="rbac.authorization.k8s.io")
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name=role),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=role),
            subjects=[subject],
        ),
    )


def as_tenant(
    plane: ControlPlane, namespace: str, verb: str, manifest: dict[str, Any], *flags: str
) -> subprocess.CompletedProcess[str]:
    return plane.kubectl(
        f"--as={TENANT}", "-n", namespace, verb, "-f", "-", *flags, input=json.dumps(manifest)
    )


MOUNTS_THE_SECRET = consumer(
    pod={"volumes": [{"name": "db", "secret": {"secretName": "db"}}]},
)
REFUSED = {
    "a Secret in envFrom": (
        consumer(processor={"envFrom": [{"secretRef": {"name": "db"}}]}),
        "spec.processor.envFrom names a Secret or ConfigMap you may not get yourself",
    ),
    "a Secret's key in env": (
        consumer(
            processor={
                "env": [
                    {
                        "name": "PASSWORD",
                        "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
                    }
                ]
            }
        ),
        "spec.processor.env reads a Secret or ConfigMap you may not get yourself",
    ),
    "a Secret volume": (MOUNTS_THE_SECRET, "spec.pod.volumes mounts a Secret"),
    "a Secret in a projected volume": (
        consumer(
            pod={"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}]}
        ),
        "spec.pod.volumes mounts a Secret",
    ),
    "a pull secret": (
        consumer(pod={"imagePullSecrets": [{"name": "db"}]}),
        "spec.pod.imagePullSecrets names a Secret you may not get yourself",
    ),
    "a kube2iam role annotation": (
        consumer(pod={"annotations": {"iam.amazonaws.com/role": "arn:aws:iam::1:role/admin"}}),
        "spec.pod.annotations needs the right to create pods",
    ),
    "an ephemeral claim": (
        consumer(
            pod={
                "volumes": [
                    {
                        "name": "clone",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "spec": {
                                    "accessModes": ["ReadWriteOnce"],
                                    "resources": {"requests": {"storage": "1Gi"}},
                                    "dataSource": {
                                        "kind": "PersistentVolumeClaim",
                                        "name": "victim",
                                    },
                                }
                            }
                        },
                    }
                ]
            }
        ),
        "spec.pod.volumes mounts",
    ),
    "a pod securityContext": (
        consumer(pod={"securityContext": {"runAsUser": 1000, "fsGroup": 2000}}),
        "spec.pod.securityContext needs the right to create pods",
    ),
    "an IRSA role": (
        consumer(
            processor={
                "serviceAccountAnnotations": {
                    "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/admin"
                }
            }
        ),
        "spec.processor.serviceAccountAnnotations needs the right to update ServiceAccounts",
    ),
}


def test_a_tenant_gets_nothing_through_a_streamconsumer_they_could_not_do_themselves(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    admission_policy: None,
    tenant: str,
) -> None:
    namespace = tenant
    first: list[subprocess.CompletedProcess[str]] = []

    def enforced() -> bool:  # a new policy takes a moment to be loaded
        first[:] = [
            as_tenant(control_plane, namespace, "create", MOUNTS_THE_SECRET, "--dry-run=server")
        ]
        return first[0].returncode != 0

    wait_for(enforced, 30, "the policy enforced")
    for case, (manifest, message) in REFUSED.items():
        refused = as_tenant(control_plane, namespace, "create", manifest)
        assert refused.returncode != 0, case
        assert message in refused.stderr, (case, refused.stderr)
        assert "a StreamConsumer cannot do for you what you may not" in refused.stderr

    plain = as_tenant(control_plane, namespace, "create", consumer("plain"))
    assert plain.returncode == 0, plain.stderr

    # Given the right to read that Secret, the tenant may have their workers mount it.
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rule = k8s.V1PolicyRule(
        api_groups=[""], resources=["secrets"], verbs=["get"], resource_names=["db"]
    )
    rbac.create_namespaced_role(
        namespace, k8s.V1Role(metadata=k8s.V1ObjectMeta(name="read-db"), rules=[rule])
    )
    bind(rbac, namespace, "read-db")
    allowed = as_tenant(control_plane, namespace, "create", MOUNTS_THE_SECRET)
    assert allowed.returncode == 0, allowed.stderr


def test_a_tenant_may_edit_an_admins_streamconsumer_but_add_nothing_they_may_not(
    control_plane: ControlPlane, admission_policy: None, tenant: str
) -> None:
    namespace = tenant
    privileged = consumer(
        "admins",
        pod={
            "volumes": [{"name": "db", "secret": {"secretName": "db"}}],
            "securityContext": {"fsGroup": 2000},
        },
    )
    created = control_plane.kubectl(
        "-n", namespace, "create", "-f", "-", input=json.dumps(privileged)
    )
    assert created.returncode == 0, created.stderr
    scaled = control_plane.kubectl(
        f"--as={TENANT}",
        "-n",
        namespace,
        "patch",
        "streamconsumer",
        "admins",
        "--type=merge",
        "-p",
        '{"spec": {"replicas": 3}}',
    )
    assert scaled.returncode == 0, scaled.stderr
    added = control_plane.kubectl(
        f"--as={TENANT}",
        "-n",
        namespace,
        "patch",
        "streamconsumer",
        "admins",
        "--type=merge",
        "-p",
        '{"spec": {"processor": {"envFrom": [{"secretRef": {"name": "db"}}]}}}',
    )
    assert added.returncode != 0
    assert "spec.processor.envFrom names a Secret" in added.stderr
    # Found by review: a new image kept the admin's references unchecked, and the
    # tenant's code then read the Secret. New code re-checks every reference.
    image = control_plane.kubectl(
        f"--as={TENANT}",
        "-n",
        namespace,
        "patch",
        "streamconsumer",
        "admins",
        "--type=merge",
        "-p",
        '{"spec": {"processor": {"image": "evil/img:1"}}}',
    )
    assert image.returncode != 0
    assert "spec.pod.volumes mounts a Secret" in image.stderr
