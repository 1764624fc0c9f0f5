"""A pod's metrics when it runs several worker processes (processor.processes): each
process serves its own on localhost, and a scrape of the pod's port reads them all at
once, each series labelled with its process (`PROCESS_LABEL`).

prometheus_client's multiprocess mode is not used: it cannot remove a series, and a
shard's series must go when the shard leaves its process (metrics.shard_left).

A scrape never waits for one process longer than `SCRAPE_DEADLINE_SECONDS` (a process
whose processor holds the GIL may answer late): what did not answer by then is left out
of that scrape and shows as `streamconsumer_worker_process_up` 0, and is not asked again
until its answer comes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures

import httpx
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

PROCESS_LABEL = "streamconsumer_process"  # a name a processor's own metrics do not use
SCRAPE_DEADLINE_SECONDS = 5.0  # well within Prometheus' default scrape timeout of 10 s
UP = "streamconsumer_worker_process_up"


class ProcessMetrics(Collector):
    def __init__(self, ports: Sequence[int], address: str = "127.0.0.1") -> None:
        self._urls = [f"http://{address}:{port}/metrics" for port in ports]
        # The pod's own ports: never through a proxy the processor's env may name.
        self._client = httpx.Client(trust_env=False, timeout=SCRAPE_DEADLINE_SECONDS)
        self._reads = futures.ThreadPoolExecutor(len(ports), "process-metrics")
        self._asked: dict[int, futures.Future[str]] = {}  # one read of a process at a time
        self._lock = threading.Lock()  # scrapes may come at once

    def _read(self, url: str) -> str:
        response = self._client.get(url)
        response.raise_for_status()
        return response.text

    def _answers(self) -> dict[int, str]:
        """Each process' exposition, as far as it came within the deadline. Scrapes at
        once (two Prometheus servers) wait on the same reads, each its own deadline."""
        with self._lock:
            for index, url in enumerate(self._urls):
                if index not in self._asked:
                    self._asked[index] = self._reads.submit(self._read, url)
            asked = dict(self._asked)
        futures.wait(asked.values(), timeout=SCRAPE_DEADLINE_SECONDS)
        answers: dict[int, str] = {}
        with self._lock:
            for index, read in asked.items():
                if not read.done():
                    continue
                if self._asked.get(index) is read:
                    del self._asked[index]
                with contextlib.suppress(Exception):  # down, starting, or a bad answer
                    answers[index] = read.result()
        return answers

    def collect(self) -> Iterator[Metric]:
        answers = self._answers()
        up = GaugeMetricFamily(
            UP, "Whether this scrape read the worker process' metrics.", labels=[PROCESS_LABEL]
        )
        merged: dict[str, Metric] = {}
        for index in range(len(self._urls)):
            families = _parsed(answers.get(index))
            up.add_metric([str(index)], 0.0 if families is None else 1.0)
            for family in families or ():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                into.samples.extend(
                    sample._replace(labels={**sample.labels, PROCESS_LABEL: str(index)})
                    for sample in family.samples
                )
        yield up
        yield from merged.values()


def _parsed(text: str | None) -> list[Metric] | None:
    if text is None:
        return None
    try:
        return list(text_string_to_metric_families(text))
    except ValueError:  # not an exposition (an error page)
        return None


def serve_processes(port: int, address: str, process_ports: Sequence[int]) -> None:
    """Serves, on the pod's port, the metrics of its processes (ProcessMetrics) only."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessMetrics(process_ports))
    start_http_server(port, address, registry=registry)
