"""The chart against every Kubernetes minor it supports (1.30 to 1.34, Chart.yaml's
kubeVersion): `helm lint --strict`, and every manifest it renders, with default values
and with every option on (tests/helm/every-option.yaml), strictly decoded with each
release's own API types (tests/kubevalidate: one binary per minor, built from that
release's k8s.io modules). An apiVersion or kind a release does not serve, or a field its
types do not have (the CRD's schema keywords and the admission policy's included), fails
here. The apiserver's own validation runs for 1.34 in test_chart.py (server-side dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamconsumer"
EVERY_OPTION = REPO / "tests" / "helm" / "every-option.yaml"
MINORS = ("1.30", "1.31", "1.32", "1.33", "1.34")
# Other projects' kinds the chart renders when asked (ServiceMonitor, PodMonitor,
# PrometheusRule; cert-manager's Issuer and Certificate): no Kubernetes release has them,
# and their CRDs are not ours.
FOREIGN = "monitoring.coreos.com,cert-manager.io"


@pytest.fixture(scope="module")
def kubevalidate() -> dict[str, Path]:
    """kubevalidate for each minor, built when missing (tests/kubevalidate/build.sh)."""
    built = subprocess.run(
        [str(REPO / "tests" / "kubevalidate" / "build.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert built.returncode == 0, built.stderr
    lines = (line.split(" ", 1) for line in built.stdout.splitlines() if line.strip())
    return {minor: Path(path) for minor, path in lines}


def render(helm: Path, minor: str, *flags: str) -> str:
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "sc",
            str(CHART),
            "--namespace",
            "streamconsumer-system",
            "--kube-version",
            f"{minor}.0",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    return rendered.stdout


@pytest.mark.parametrize("minor", MINORS)
def test_the_chart_lints_strictly(helm: Path, minor: str) -> None:
    for values in ((), ("--values", str(EVERY_OPTION))):
        linted = subprocess.run(
            [str(helm), "lint", "--strict", str(CHART), "--kube-version", f"{minor}.0", *values],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("minor", MINORS)
def test_every_rendered_manifest_decodes_strictly_with_that_releases_types(
    helm: Path, kubevalidate: dict[str, Path], minor: str
) -> None:
    for values in ((), ("--values", str(EVERY_OPTION))):
        manifests = render(helm, minor, *values)
        checked = subprocess.run(
            [str(kubevalidate[minor]), "-foreign", FOREIGN, "-"],
            input=manifests,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0, (values, checked.stdout + checked.stderr)
        assert f"Kubernetes {minor}." in checked.stdout, checked.stdout
        ok = {
            line.split()[2].split("/")[0]
            for line in checked.stdout.splitlines()
            if line[:3] == "OK "
        }
        assert {"CustomResourceDefinition", "ValidatingAdmissionPolicy", "Deployment"} <= ok


def test_the_validator_refuses_what_a_release_does_not_have(
    kubevalidate: dict[str, Path],
) -> None:
    """What it must catch, shown on each kind of mistake: an unknown field (in a CRD's
    schema too), an apiVersion the release no longer serves, a kind newer than it, a
    beta that is off by default."""
    unknown_field = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: a}
automountToken: false
"""
    crd_keyword = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-validation: [{rule: "true"}]
"""
    gone_version = """
apiVersion: policy/v1beta1
kind: PodDisruptionBudget
metadata: {name: a}
spec: {maxUnavailable: 1}
"""
    # MutatingAdmissionPolicy is admissionregistration.k8s.io/v1beta1 from 1.34 only.
    newer_kind = """
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: a}
spec: {}
"""

    def refused(minor: str, manifest: str) -> str:
        checked = subprocess.run(
            [str(kubevalidate[minor]), "-"], input=manifest, capture_output=True, text=True
        )
        assert checked.returncode == 1, checked.stdout + checked.stderr
        return checked.stdout

    assert 'unknown field "automountToken"' in refused("1.34", unknown_field)
    assert "x-kubernetes-validation" in refused("1.30", crd_keyword)
    assert "no longer serves policy/v1beta1 (removed in 1.25)" in refused("1.30", gone_version)
    assert "serves no kind MutatingAdmissionPolicy" in refused("1.33", newer_kind)
    # A beta new since 1.24 is off by default (KEP-3136): not served as installed.
    assert "(a beta of 1.34, off by default)" in refused("1.34", newer_kind)
    ga = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
    accepted = subprocess.run(
        [str(kubevalidate["1.30"]), "-"], input=ga + "metadata: {name: a}\n", text=True
    )
    assert accepted.returncode == 0
