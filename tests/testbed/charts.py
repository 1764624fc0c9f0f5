"""The previous chart, for the install → upgrade tests (docs/upgrades.md): the chart as
it stood at PREVIOUS_CHART_COMMIT, taken from the repository's history, and the steps
docs/upgrades.md gives to upgrade from it.

This is 0.1.0 as pinned by a commit of main's history, the last chart that shipped the
CRD in its crds/ folder (Helm must be told to adopt it). The previous release proper is
tests/releases/chart.tgz (testbed.releases), whose CRD is a template already; the
integration test upgrades from both. A full clone has the commit (CI clones in full); a
shallow one does not, and previous_chart says how to fix that."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamconsumer"
PREVIOUS_CHART_COMMIT = "487d2ff79804ec1f1af4aa3015bc54a8a35571e7"  # chart 0.1.0, crds/
PREVIOUS_CHART_VERSION = "0.1.0"
CRD = "streamconsumers.streamconsumer.io"


def previous_chart(into: Path) -> Path:
    """The chart at PREVIOUS_CHART_COMMIT, extracted from git into `into`."""
    known = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_CHART_COMMIT}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if known.returncode != 0:
        raise AssertionError(
            f"commit {PREVIOUS_CHART_COMMIT} (the previous chart) is not in this clone: the "
            "upgrade tests need the repository's history (git fetch --unshallow)"
        )
    where = "charts/streamconsumer"
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_CHART_COMMIT, where],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
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
