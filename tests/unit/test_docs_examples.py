"""The observability examples in docs/: the Argo CD health check against its test cases
(run in a real Lua), and every metric the dashboards and scalers query is one we export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from lupa import lua51  # Argo CD runs health checks in gopher-lua, a Lua 5.1

from streamconsumer.controller import metrics as operator_metrics
from streamconsumer.worker import metrics as worker_metrics  # noqa: F401  (registers them)

DOCS = Path(__file__).resolve().parents[2] / "docs"
CASES = yaml.safe_load((DOCS / "argocd" / "health_test.yaml").read_text())["tests"]


def health(obj: dict[str, object]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    script = (DOCS / "argocd" / "health.lua").read_text()
    lua_obj = _to_lua(runtime, obj)
    function = runtime.eval("function(obj) " + script + " end")
    result = function(lua_obj)
    return {"status": result["status"], "message": result["message"]}


def _to_lua(runtime: lua51.LuaRuntime, value: object) -> object:
    if isinstance(value, dict):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_argocd_health_check(case: dict[str, object]) -> None:
    obj = yaml.safe_load((DOCS / "argocd" / str(case["inputPath"])).read_text())
    assert health(obj) == case["healthStatus"]


def exported_metric_names() -> set[str]:
    from prometheus_client import REGISTRY

    names: set[str] = set()
    for registry in (operator_metrics.REGISTRY, REGISTRY):
        for family in registry.collect():
            names.update(sample.name for sample in family.samples)
            names.add(family.name)
            for suffix in ("_total", "_bucket", "_count", "_sum"):
                names.add(family.name + suffix)
    return names


def queried_metrics(text: str) -> set[str]:
    return set(re.findall(r"\b(streamconsumer_[a-z_]+)\b", text))


def test_dashboards_and_scalers_query_metrics_we_export() -> None:
    exported = exported_metric_names()
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
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
