"""The Helm chart lints, renders, and its manifests are accepted by the real apiserver
(server-side dry run); so are the examples and the kustomize overlay."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from streamconsumer.controller.leadership import LEADER_LABEL
from testbed.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamconsumer"


KUBE_VERSION = "1.34.4"  # what the test control plane runs; helm assumes 1.20 offline


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)


def template(helm: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run(helm, "template", "sc", CHART, "--kube-version", KUBE_VERSION, *flags)


def test_chart_lints(helm: Path) -> None:
    result = run(helm, "lint", "--strict", CHART)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_chart_applies_on_the_real_apiserver(
    helm: Path, control_plane: ControlPlane, namespace: str
) -> None:
    rendered = template(helm, "--namespace", namespace, "--include-crds")
    assert rendered.returncode == 0, rendered.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert kinds == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
    }
    applied = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered.stdout
    )
    assert applied.returncode == 0, applied.stderr


def test_values_schema_refuses_bad_values(helm: Path) -> None:
    for flag, field in (
        ("replicas=-1", "replicas"),
        ("leaderElection.retrySeconds=0", "retrySeconds"),
        ("api.port=80", "port"),
        ("logLevel=LOUD", "logLevel"),
    ):
        result = template(helm, "--set", flag)
        assert result.returncode != 0, flag
        assert field in result.stderr, result.stderr


def test_the_worker_api_follows_the_leader_and_upgrades_roll(helm: Path) -> None:
    docs = [d for d in yaml.safe_load_all(template(helm).stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["Service"]["spec"]["selector"][LEADER_LABEL] == "true"
    deployment = by_kind["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod_labels = deployment["template"]["metadata"]["labels"]
    assert by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= (
        pod_labels.items()
    )
    env = {e["name"]: e for e in deployment["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMCONSUMER_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    single = template(helm, "--set", "replicas=1").stdout
    assert "PodDisruptionBudget" not in single, "a PDB on one replica would block every drain"


def test_namespaced_install_renders_namespace_flags(helm: Path) -> None:
    result = template(helm, "--set", "watchNamespaces={team-a,team-b}")
    assert result.returncode == 0, result.stderr
    assert "--namespace=team-a" in result.stdout
    assert "--all-namespaces" not in result.stdout


def test_hpa_example_applies_on_the_real_apiserver(
    control_plane: ControlPlane, namespace: str
) -> None:
    # (The KEDA example needs KEDA's CRDs, which this control plane does not have; its
    # query is checked against our metric names in tests/unit/test_docs_examples.py.)
    hpa = REPO / "docs" / "autoscaling" / "hpa.yaml"
    applied = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(hpa))
    assert applied.returncode == 0, applied.stderr


def test_service_monitor_is_optional_and_scrapes_the_metrics_endpoint(helm: Path) -> None:
    assert "ServiceMonitor" not in template(helm).stdout, "off by default"
    rendered = template(
        helm, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom"
    )
    assert rendered.returncode == 0, rendered.stderr
    monitor = next(
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "ServiceMonitor"
    )
    service = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Service")
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["metadata"]["labels"]["release"] == "prom"


def test_examples_apply_on_the_real_apiserver(control_plane: ControlPlane, namespace: str) -> None:
    example = REPO / "examples" / "clickstream" / "streamconsumer.yaml"
    applied = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(example)
    )
    assert applied.returncode == 0, applied.stderr
    overlay = control_plane.kubectl("kustomize", str(REPO / "examples/kustomize/production"))
    assert overlay.returncode == 0, overlay.stderr
    assert "replicas: 4" in overlay.stdout
    rendered = overlay.stdout.replace("namespace: clickstream", f"namespace: {namespace}")
    applied = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert applied.returncode == 0, applied.stderr
