"""The chart as the tests render it (`rendered`), and the previous chart, for the
install → upgrade tests (docs/upgrades.md): the chart as
it stood at PREVIOUS_CHART_COMMIT, committed as tests/releases/PREVIOUS_CHART_ARCHIVE (a
file in the tree, so a shallow clone runs the same tests), and the steps docs/upgrades.md
gives to upgrade from it.

This is 0.1.0, the last chart that shipped the CRD in its crds/ folder (Helm must be told
to adopt it). The previous release proper is tests/releases/chart.tgz (testbed.releases),
whose CRD is a template already; the integration test upgrades from both."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamconsumer"
DASHBOARD = CHART / "dashboards" / "streamconsumer.json"  # also a ConfigMap of the chart's
PREVIOUS_CHART_COMMIT = "487d2ff79804ec1f1af4aa3015bc54a8a35571e7"  # chart 0.1.0, crds/
PREVIOUS_CHART_VERSION = "0.1.0"
# `git archive PREVIOUS_CHART_COMMIT charts/streamconsumer | gzip -n -9`
PREVIOUS_CHART_ARCHIVE = "chart-0.1.0-crds-folder.tar.gz"
CRD = "streamconsumers.streamconsumer.io"
KUBE_VERSION = "1.34.4"  # what the test control plane runs; helm assumes 1.20 offline


def rendered(helm: Path, *flags: str, chart: Path = CHART) -> str:
    """`helm template` of `chart` (release "sc") with `flags`, for the test control
    plane's Kubernetes version; raises if helm refuses it."""
    argv = [str(helm), "template", "sc", str(chart), "--kube-version", KUBE_VERSION, *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


def previous_chart(into: Path) -> Path:
    """The chart at PREVIOUS_CHART_COMMIT, extracted into `into`."""
    with tarfile.open(REPO / "tests" / "releases" / PREVIOUS_CHART_ARCHIVE) as tar:
        tar.extractall(into, filter="data")
    return into / "charts" / "streamconsumer"


def adopt_crd(release: str, namespace: str) -> list[tuple[str, ...]]:
    """The kubectl arguments docs/upgrades.md gives to let Helm take over a CRD it did not
    create through a template (the previous chart's crds/ folder)."""
    return [
        ("label", "crd", CRD, "app.kubernetes.io/managed-by=Helm"),
        (
            "annotate",
            "crd",
            CRD,
            f"meta.helm.sh/release-name={release}",
            f"meta.helm.sh/release-namespace={namespace}",
        ),
    ]


def documented(command: tuple[str, ...]) -> bool:
    """Whether docs/upgrades.md shows this kubectl command (its line break as written)."""
    line = " ".join(command).replace(f"{CRD} meta", f"{CRD} \\\n  meta")
    return f"kubectl {line}" in (REPO / "docs" / "upgrades.md").read_text()


# The upgrade's flag (docs/upgrades.md): the new chart's defaults, then the release's values.
UPGRADE_VALUES_FLAG = "--reset-then-reuse-values"
