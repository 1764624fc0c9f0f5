"""The observability examples in docs/: the Argo CD health check against its test cases
(run in a real Lua), and every metric the dashboards, scalers and docs name is one we
export, by the name Prometheus sees."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from streamconsumer.controller import metrics as operator_metrics
from streamconsumer.worker import metrics as worker_metrics  # noqa: F401  (registers them)
from streamconsumer.worker.process_metrics import PROCESS_LABEL, UP
from testbed.argocd import health
from testbed.charts import DASHBOARD

from .test_troubleshooting import condition_reasons, package_trees

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CASES = yaml.safe_load((DOCS / "argocd" / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_argocd_health_check(case: dict[str, object]) -> None:
    obj = yaml.safe_load((DOCS / "argocd" / str(case["inputPath"])).read_text())
    assert health(obj) == case["healthStatus"]


# The names a family's samples have, by its type: prometheus_client exposes a counter
# `x` as `x_total` (and `x_created`, which no doc needs); a histogram is named by its own
# name too.
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("", "_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
}


@pytest.mark.parametrize(
    "path", sorted((DOCS / "argocd" / "testdata").glob("*.yaml")), ids=lambda p: p.name
)
def test_argocd_test_cases_carry_reasons_the_operator_writes(path: Path) -> None:
    """A case the operator could never produce tests nothing: each condition's reason is
    one the operator gives that condition type."""
    written = condition_reasons(package_trees())
    status = yaml.safe_load(path.read_text()).get("status") or {}
    unknown = [
        (c["type"], c["reason"])
        for c in status.get("conditions", [])
        if c["reason"] not in written.get(c["type"], set())
    ]
    assert unknown == []


def exported_metric_names() -> set[str]:
    from prometheus_client import REGISTRY

    names = {UP}  # a worker pod's, from a collector of its own (process_metrics)
    for registry in (operator_metrics.REGISTRY, REGISTRY):
        for family in registry.collect():
            if family.name.startswith("streamconsumer_"):
                suffixes = SAMPLE_SUFFIXES.get(family.type, ("",))
                names.update(family.name + suffix for suffix in suffixes)
    return names


METRIC_NAME = re.compile(r"(?<![\w.])streamconsumer_[a-z0-9_]*[a-z0-9](?![\w*])")


def queried_metrics(text: str) -> set[str]:
    return set(METRIC_NAME.findall(text))


def test_dashboards_and_scalers_query_metrics_we_export() -> None:
    exported = exported_metric_names()
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    sources = {
        "grafana": expressions,
        "hpa": (DOCS / "autoscaling" / "hpa.yaml").read_text(),
        "keda": (DOCS / "autoscaling" / "keda-scaledobject.yaml").read_text(),
    }
    for name, text in sources.items():
        queried = queried_metrics(text)
        assert queried, name
        assert queried <= exported, (name, queried - exported)


# What docs/upgrades.md says they were called before they were renamed.
RETIRED_METRICS = {
    "streamconsumer_millis_behind_latest",
    "streamconsumer_max_millis_behind_latest",
    "streamconsumer_worker_millis_behind_latest",
}


@pytest.mark.parametrize(
    "doc",
    # The CRD too: `kubectl explain` shows its descriptions.
    [REPO / "README.md", *sorted(DOCS.glob("*.md")), REPO / "crds" / "streamconsumer.yaml"],
    ids=lambda path: path.name,
)
def test_every_metric_a_doc_names_is_exported(doc: Path) -> None:
    """By the name a PromQL query needs: a counter's ends in `_total`."""
    known = exported_metric_names() | {PROCESS_LABEL}  # a label, a process' number
    if doc.name == "upgrades.md":
        known |= RETIRED_METRICS
    assert queried_metrics(doc.read_text()) - known == set()


def test_the_doc_metric_check_can_fail() -> None:
    text = "see `streamconsumer_worker_skipped_records` and `streamconsumer_worker_*`"
    assert queried_metrics(text) - exported_metric_names() == {
        "streamconsumer_worker_skipped_records"
    }
