"""Operator and worker metrics, scraped over HTTP as Prometheus would."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import free_port
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and set(labels.items()) <= set(sample_labels)
    )


def test_operator_and_worker_metrics(scenario: Scenario) -> None:
    port = free_port()
    scenario.start(
        shards=2, replicas=1, pod_env=lambda pod: {"STREAMCONSUMER_METRICS_PORT": str(port)}
    )
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "every record")
    assert scenario.operator is not None
    operator_url = scenario.operator.metrics_url
    wait_for(
        lambda: total(scrape(operator_url), "streamconsumer_status_writes_total") >= 1,
        30,
        "a write",
    )
    operator = scrape(operator_url)
    ours = {"namespace": scenario.namespace, "consumer": scenario.name}
    assert total(operator, "streamconsumer_lease_actions_total", action="grant", **ours) == 2
    assert total(operator, "streamconsumer_checkpoints_total", result="ok", **ours) >= 2
    assert total(operator, "streamconsumer_workers", **ours) == 1
    assert total(operator, "streamconsumer_open_shards", **ours) == 2

    worker = scrape(f"http://127.0.0.1:{port}/metrics")
    assert total(worker, "streamconsumer_worker_records_total") == 100
    assert total(worker, "streamconsumer_worker_bytes_total") == sum(
        len(value) for value in scenario.produced
    )
    assert total(worker, "streamconsumer_worker_process_seconds_count") >= 2
