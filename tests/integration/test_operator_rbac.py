"""The chart's RBAC on the real apiserver (issue 24): the operator's effective rights,
listed by the apiserver itself, are exactly what the code needs, in the watched
namespaces only; tenants get StreamConsumer rights through the built-in roles."""

from __future__ import annotations

import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from testbed import charts
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
OPERATOR = "sc-operator"

# Resource -> verbs the operator uses where StreamConsumers live, and nothing more.
IN_WATCHED_NAMESPACES = {
    "streamconsumers.streamconsumer.io": {"get", "list", "watch", "patch"},
    # update: the previous release's operator PUTs the status while an upgrade rolls.
    "streamconsumers.streamconsumer.io/status": {"get", "update", "patch"},
    "deployments.apps": {"get", "create", "patch", "delete"},  # a refused spec's workers
    "serviceaccounts": {"get", "create", "patch"},
    "configmaps": {"get", "create", "patch", "list", "delete"},  # list, delete: lease groups
    "poddisruptionbudgets.policy": {"get", "create", "patch"},
    "pods": {"get", "list", "watch"},
    "replicasets.apps": {"get"},
    "events": {"create", "patch"},
    "events.events.k8s.io": {"create", "patch"},
}
EVERYWHERE = {
    "tokenreviews.authentication.k8s.io": {"create"},
    "customresourcedefinitions.apiextensions.k8s.io": {"get", "list", "watch"},
    "namespaces": {"get", "list", "watch"},
}


def rights(plane: ControlPlane, user: str, namespace: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list`: resource -> verbs, as the apiserver judges them."""
    listed = plane.kubectl("auth", "can-i", "--list", f"--as={user}", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    table: dict[str, set[str]] = {}
    for line in listed.stdout.splitlines()[1:]:
        resource = line.split()[0]
        verbs = line[line.rindex("[") + 1 : line.rindex("]")].split()
        if resource.startswith("/") or not verbs:  # non-resource URLs
            continue
        table.setdefault(resource, set()).update(verbs)
    return table


def minus(more: dict[str, set[str]], base: dict[str, set[str]]) -> dict[str, set[str]]:
    out = {r: v - base.get(r, set()) for r, v in more.items()}
    return {r: v for r, v in out.items() if v}


@pytest.fixture
def release(control_plane: ControlPlane, helm: Path, namespace: str) -> Iterator[str]:
    """The chart's RBAC, watching the test's namespace only; the release namespace."""
    release_namespace = f"sc-system-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", release_namespace)
    rbac = charts.rendered(
        helm,
        *("--namespace", release_namespace),
        *("--set", f"watchNamespaces={{{namespace}}}"),
        *("--show-only", "templates/rbac.yaml"),
        *("--show-only", "templates/serviceaccount.yaml"),
    )
    applied = control_plane.kubectl("apply", "-f", "-", input=rbac)
    assert applied.returncode == 0, applied.stderr
    yield release_namespace
    control_plane.kubectl("delete", "-f", "-", "--wait=false", input=rbac)
    control_plane.kubectl("delete", "namespace", release_namespace, "--wait=false")


def test_the_operator_has_exactly_the_rights_it_needs_and_only_where_it_watches(
    control_plane: ControlPlane, namespace: str, release: str
) -> None:
    operator = f"system:serviceaccount:{release}:{OPERATOR}"
    nobody = f"system:serviceaccount:{release}:nobody-{uuid.uuid4().hex[:4]}"
    baseline = rights(control_plane, nobody, namespace)  # what every account may do
    watched = minus(rights(control_plane, operator, namespace), baseline)
    assert watched == IN_WATCHED_NAMESPACES | EVERYWHERE
    # Where it runs, its leader Lease: read, created once, then PUT at each renewal.
    at_home = minus(rights(control_plane, operator, release), baseline)
    assert at_home["leases.coordination.k8s.io"] == {"get", "create", "update"}

    elsewhere_ns = f"elsewhere-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", elsewhere_ns)
    try:
        elsewhere = minus(rights(control_plane, operator, elsewhere_ns), baseline)
        assert elsewhere == EVERYWHERE, "nothing of the consumers' rights outside its namespaces"
    finally:
        control_plane.kubectl("delete", "namespace", elsewhere_ns, "--wait=false")


def test_a_namespace_editor_may_manage_streamconsumers_and_a_viewer_read_them(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str, release: str
) -> None:
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    for user, role in (("editor", "edit"), ("viewer", "view")):
        subject = k8s.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")
        rbac.create_namespaced_role_binding(
            namespace,
            k8s.V1RoleBinding(
                metadata=k8s.V1ObjectMeta(name=user),
                role_ref=k8s.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
                ),
                subjects=[subject],
            ),
        )

    def may(user: str, verb: str) -> bool:
        answer = control_plane.kubectl(
            "auth",
            "can-i",
            verb,
            "streamconsumers.streamconsumer.io",
            f"--as={user}",
            "-n",
            namespace,
        )
        return answer.stdout.strip() == "yes"

    # The aggregation controller folds the chart's roles into edit and view.
    wait_for(lambda: may("editor", "create"), 60, "edit aggregating StreamConsumer rights")
    wait_for(lambda: may("viewer", "list"), 60, "view aggregating StreamConsumer rights")
    assert may("editor", "delete")
    assert not may("viewer", "create")
    assert not may("viewer", "patch")
    roles = yaml.safe_load(control_plane.kubectl("get", "clusterrole", "view", "-o", "yaml").stdout)
    assert any("streamconsumers" in rule.get("resources", []) for rule in roles["rules"])


def _operator_verbs(helm: Path, chart: Path) -> dict[str, set[str]]:
    """The operator's Roles in `chart` as rendered: "group/resource" -> verbs."""
    manifests = charts.rendered(helm, chart=chart)
    verbs: dict[str, set[str]] = {}
    for document in yaml.safe_load_all(manifests):
        if not document or document["kind"] not in ("Role", "ClusterRole"):
            continue
        if document["metadata"]["name"].endswith(("-edit", "-view")):
            continue  # the tenants' aggregated roles
        for rule in document.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    verbs.setdefault(f"{group}/{resource}", set()).update(rule["verbs"])
    return verbs


@pytest.mark.parametrize("previous", ["chart.tgz", "chart-0.1.0-crds-folder.tar.gz"])
def test_the_previous_releases_operator_keeps_its_write_verbs_through_an_upgrade(
    helm: Path, tmp_path: Path, previous: str
) -> None:
    """While an upgrade rolls, the previous release's operator leads under this chart's
    Roles: its Lease renewals and status writes must still be allowed. (The other way
    round, this operator under the previous chart's Roles, is the real node's
    test_chart_upgrade.py.)"""
    with tarfile.open(REPO / "tests" / "releases" / previous) as archive:
        archive.extractall(tmp_path, filter="data")
    [old_chart] = [p.parent for p in tmp_path.rglob("Chart.yaml")]
    old = _operator_verbs(helm, old_chart)
    new = _operator_verbs(helm, charts.CHART)
    for resource in ("coordination.k8s.io/leases", "streamconsumer.io/streamconsumers/status"):
        assert old[resource], f"the previous chart grants nothing on {resource}?"
        missing = old[resource] - new[resource]
        assert not missing, f"{resource}: this chart drops {missing}, which {previous} used"
