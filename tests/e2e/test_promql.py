"""Every PromQL expression the project ships (the chart's alerting rules, the Grafana
dashboard, the KEDA and HPA examples, docs/monitoring.md) asked of a real Prometheus that
scraped the real operator and workers as the chart's ServiceMonitor and PodMonitor say."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml

from testbed import charts
from testbed.processes import free_port
from testbed.prometheus import Prometheus, PromQLError, Target, binary, rule_file
from testbed.scenario import Scenario
from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RELEASE_NAMESPACE = "streamconsumer-system"  # not the consumers': label clashes show
EXAMPLE = {"team-a": "namespace", "clicks": "consumer"}  # the docs' example names


def rendered_monitoring(helm: Path) -> dict[str, dict[str, Any]]:
    flags = [
        "--namespace",
        RELEASE_NAMESPACE,
        *("--set", "serviceMonitor.enabled=true"),
        *("--set", "podMonitor.enabled=true"),
        *("--set", "prometheusRule.enabled=true"),
    ]
    out = charts.rendered(helm, *flags)
    return {d["kind"]: d for d in yaml.safe_load_all(out) if d}


def relabel_configs(endpoint: dict[str, Any]) -> list[dict[str, Any]]:
    """A monitor endpoint's relabelings, as Prometheus' relabel_configs."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [
        {keys.get(key, key): value for key, value in relabeling.items()}
        for relabeling in endpoint.get("relabelings", [])
    ]


def dashboard_expressions(namespace: str, consumer: str) -> dict[str, str]:
    dashboard = json.loads(charts.DASHBOARD.read_text())
    found: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if match := re.fullmatch(r"label_values\((.+), *(\w+)\)", variable.get("query", "")):
            found[f"dashboard variable {variable['name']}"] = match[1]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            found[f"dashboard panel {panel['title']!r} {target['refId']}"] = target["expr"]
    return {
        what: expr.replace("$namespace", namespace).replace("$consumer", consumer)
        for what, expr in found.items()
    }


def example_expressions(namespace: str, consumer: str) -> dict[str, str]:
    def ours(text: str) -> str:
        return text.replace('"team-a"', f'"{namespace}"').replace('"clicks"', f'"{consumer}"')

    keda = yaml.safe_load((DOCS / "autoscaling" / "keda-scaledobject.yaml").read_text())
    hpa = yaml.safe_load((DOCS / "autoscaling" / "hpa.yaml").read_text())
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    matchers = ",".join(f'{k}="{v}"' for k, v in metric["selector"]["matchLabels"].items())
    found = {
        "KEDA ScaledObject": ours(keda["spec"]["triggers"][0]["metadata"]["query"]),
        # What a Prometheus adapter asks for the HPA's external metric.
        "HPA external metric": ours(f"{metric['name']}{{{matchers}}}"),
    }
    text = (DOCS / "monitoring.md").read_text()
    for index, block in enumerate(re.findall(r"```promql\n(.*?)```", text, re.S)):
        found[f"docs/monitoring.md block {index + 1}"] = ours(block.strip())
    return found


def test_every_shipped_promql_returns_series_from_a_real_scrape(
    scenario: Scenario, helm: Path, tmp_path: Path
) -> None:
    prometheus_binary = binary()  # built by `make test` (make prometheus)
    monitoring = rendered_monitoring(helm)
    service_monitor = monitoring["ServiceMonitor"]["spec"]["endpoints"][0]
    pod_monitor = monitoring["PodMonitor"]["spec"]["podMetricsEndpoints"][0]

    worker_ports: dict[str, int] = {}

    def metrics_port(pod: str) -> dict[str, str]:
        worker_ports[pod] = free_port()
        return {"STREAMCONSUMER_METRICS_PORT": str(worker_ports[pod])}

    scenario.start(shards=2, replicas=1, pod_env=metrics_port)
    scenario.produce(50)
    wait_for(scenario.all_processed, 60, "every record")
    assert scenario.operator is not None

    # The target labels the Prometheus Operator gives each monitor's targets.
    targets = [
        Target(
            "serviceMonitor/streamconsumer",
            f"127.0.0.1:{scenario.operator.metrics_port}",
            {"namespace": RELEASE_NAMESPACE, "pod": "streamconsumer-operator-0"},
            honor_labels=bool(service_monitor.get("honorLabels")),
        ),
        *(
            Target(
                "podMonitor/streamconsumer-workers",
                f"127.0.0.1:{port}",
                {
                    "namespace": scenario.namespace,
                    "pod": pod,
                    "__meta_kubernetes_pod_label_streamconsumer_io_consumer": scenario.name,
                },
                honor_labels=bool(pod_monitor.get("honorLabels")),
                relabel_configs=relabel_configs(pod_monitor),
            )
            for pod, port in worker_ports.items()
        ),
    ]
    rules = rule_file(monitoring["PrometheusRule"], tmp_path / "rules.yml")
    prometheus = Prometheus(tmp_path / "prometheus", targets, [rules]).start(prometheus_binary)
    try:
        wait_for(
            lambda: set(prometheus.targets_up().values()) == {"up"}, 30, "every target scraped"
        )
        time.sleep(5)  # a few scrapes: rate() and deriv() need two samples or more

        shipped = {
            **{f"alert {r['alert']}": r["expr"] for r in _alerting_rules(monitoring)},
            **dashboard_expressions(scenario.namespace, scenario.name),
            **example_expressions(scenario.namespace, scenario.name),
        }
        empty: dict[str, str] = {}
        for what, expr in shipped.items():
            try:
                # An alert's condition holds only when something is wrong; each series
                # it reads must still be there. The rest must return series as shipped.
                for selector in prometheus.selectors(expr):
                    if not prometheus.query(selector):
                        empty[what] = f"{selector} matches nothing (in {expr})"
                if not what.startswith("alert ") and not prometheus.query(expr):
                    empty.setdefault(what, f"no series: {expr}")
            except PromQLError as error:
                empty[what] = f"refused: {error} (in {expr})"
        assert not empty, "\n".join(f"{what}: {why}" for what, why in empty.items())
        assert len(shipped) >= 20, sorted(shipped)

        # The rules Prometheus loaded from the chart evaluate without error.
        wait_for(
            lambda: all(r.get("lastEvaluation", "").startswith("2") for r in prometheus.rules()),
            30,
            "every rule evaluated",
        )
        broken = {r["name"]: r.get("lastError") for r in prometheus.rules() if r["health"] != "ok"}
        assert not broken
        assert {r["name"] for r in prometheus.rules()} == {
            r["alert"] for r in _alerting_rules(monitoring)
        }
    finally:
        prometheus.stop()


def _alerting_rules(monitoring: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in monitoring["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
