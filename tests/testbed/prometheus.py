"""A real Prometheus (built from its Go module, tests/prometheus/build.sh) that scrapes the
test bed's operator and workers the way the chart's ServiceMonitor and PodMonitor have the
Prometheus Operator do it: the same honor_labels, and the target labels the operator adds
(namespace, pod, and for workers the consumer from the pod's label). Then any PromQL we
ship can be asked of what it really scraped."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from testbed.processes import Server, free_port, stopped_on_failure

REPO = Path(__file__).resolve().parents[2]
SCRAPE_SECONDS = 1


def binary() -> Path:
    """prometheus (built once, then cached)."""
    out = subprocess.run(
        [str(REPO / "tests" / "prometheus" / "build.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Target:
    """One scrape target: host:port, the labels its monitor gives it, whether the metrics'
    own labels win over those (the monitor's honorLabels), and its relabelings. Targets of
    one job share the job's settings (the first one's)."""

    job: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    honor_labels: bool = False
    relabel_configs: list[dict[str, Any]] = field(default_factory=list)


class Prometheus:
    def __init__(self, workdir: Path, targets: list[Target], rule_files: list[Path]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._workdir = workdir
        self._targets = targets
        self._rule_files = rule_files
        self.server: Server | None = None

    def config(self) -> dict[str, Any]:
        jobs: dict[str, list[Target]] = {}
        for target in self._targets:
            jobs.setdefault(target.job, []).append(target)
        return {
            "global": {
                "scrape_interval": f"{SCRAPE_SECONDS}s",
                "evaluation_interval": f"{SCRAPE_SECONDS}s",
            },
            "rule_files": [str(path) for path in self._rule_files],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": targets[0].honor_labels,
                    "relabel_configs": targets[0].relabel_configs,
                    "static_configs": [
                        {"targets": [t.address], "labels": t.labels} for t in targets
                    ],
                }
                for job, targets in jobs.items()
            ],
        }

    def start(self, prometheus: Path) -> Prometheus:
        """Fails with its log if it refuses the config or a rule file."""
        self._workdir.mkdir(parents=True, exist_ok=True)
        config = self._workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        self.server = Server(
            "prometheus",
            [
                str(prometheus),
                f"--config.file={config}",
                f"--storage.tsdb.path={self._workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            self._workdir,
        )
        with stopped_on_failure(self.stop):
            self.server.wait_until(self._ready, 60, "ready")
        return self

    def _ready(self) -> bool:
        return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _api(self, path: str, **params: str) -> Any:
        reply = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        if reply["status"] != "success":
            raise PromQLError(f"{reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant query's result (a vector's samples; a scalar as one sample)."""
        data = self._api("query", query=expr)
        if data["resultType"] == "vector":
            return list(data["result"])
        return [{"metric": {}, "value": data["result"]}]

    def selectors(self, expr: str) -> list[str]:
        """Every vector selector in `expr`, as PromQL (Prometheus' own parser)."""
        found: list[str] = []
        _walk(self._api("parse_query", query=expr), found)
        return found

    def targets_up(self) -> dict[str, str]:
        """Each target's scrape URL and health (up, down, unknown)."""
        active = self._api("targets")["activeTargets"]
        return {t["scrapeUrl"]: t["health"] for t in active}

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self._api("rules")["groups"] for rule in group["rules"]]


class PromQLError(Exception):
    """Prometheus refused a query."""


def _walk(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "vectorSelector":
            found.append(_selector(node))
        for value in node.values():
            _walk(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, found)


def _selector(node: dict[str, Any]) -> str:
    matchers = [
        f"{m['name']}{m['type']}{_quoted(m['value'])}"
        for m in node.get("matchers", [])
        if m["name"] != "__name__"
    ]
    return f"{node.get('name', '')}{{{','.join(matchers)}}}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rule_file(rendered_rule: dict[str, Any], path: Path) -> Path:
    """The rule groups of a rendered PrometheusRule, as a Prometheus rule file."""
    path.write_text(yaml.safe_dump({"groups": rendered_rule["spec"]["groups"]}))
    return path
