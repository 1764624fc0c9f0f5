"""The supervisor of a pod's worker processes (processor.processes, worker/processes.py),
as a real process over real processes that stand in for workers: what each is named, a
SIGTERM sent to the supervisor alone (as a container runtime sends it), a process that
ends by itself, a supervisor killed, a process frozen in its drain; and the pod's
metrics read from every process over HTTP."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from streamconsumer.controller.consumer.registry import ManagedConsumer
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api.answers import heartbeat, speaks_for
from streamconsumer.core.lineage import Shard
from streamconsumer.models import HeartbeatRequest
from streamconsumer.models.api import HeldShard, worker_pod
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.process_metrics import (
    PROCESS_LABEL,
    SCRAPE_DEADLINE_SECONDS,
    UP,
    ProcessMetrics,
)
from streamconsumer.worker.processes import KILL_AFTER_DRAIN_MARGIN_SECONDS, PodProcesses
from testbed.processes import free_port
from testbed.specs import consumer_spec
from unit.fenced import fenced_consumer
from unit.moments import CREATED

# A stand-in worker: says its environment, then waits for SIGTERM ("drained") or, if
# told, ends by itself, or ignores SIGTERM (frozen in its drain).
STAND_IN = """
import json, os, signal, sys, time
out = os.environ["OUT"]
name = os.environ["STREAMCONSUMER_WORKER_NAME"]
def drained(*_):
    open(os.path.join(out, name + ".drained"), "w").close()
    sys.exit(0)
frozen = name.endswith(os.environ.get("FROZEN", "-"))
signal.signal(signal.SIGTERM, signal.SIG_IGN if frozen else drained)
with open(os.path.join(out, name + ".json"), "w") as f:
    json.dump({k: v for k, v in os.environ.items() if k.startswith("STREAMCONSUMER_")}, f)
if name.endswith(os.environ.get("ENDS", "-")):
    time.sleep(0.5)  # the others are up
    sys.exit(3)
while True:
    time.sleep(0.05)
"""

SUPERVISOR = """
import sys
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.processes import supervise
sys.exit(supervise(WorkerConfig.from_env(), [sys.executable, "-c", sys.argv[1]]))
"""


def config(processes: int, **settings: str) -> dict[str, str]:
    values = {
        "operator_url": "http://127.0.0.1:1",
        "namespace": "ns",
        "consumer": "c",
        "worker_name": "pod-a",
        "token_path": "/nonexistent",
        "entrypoint": "m:f",
        "stream_name": "s",
        "processes": str(processes),
        "drain_seconds": "0.5",
        **settings,
    }
    return {WorkerConfig.env_name(key): value for key, value in values.items()}


Started = dict[str, subprocess.Popen[bytes]]


@pytest.fixture
def run() -> Iterator[Started]:
    started: Started = {}
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def supervisor(
    started: dict[str, subprocess.Popen[bytes]], out: Path, processes: int, **env: str
) -> subprocess.Popen[bytes]:
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "OUT": str(out),
        **config(processes),
        **env,
    }
    process = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, STAND_IN], env=environment, stdin=subprocess.DEVNULL
    )
    started["supervisor"] = process
    return process


def wait_for_files(out: Path, pattern: str, count: int, timeout: float = 20.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(out.glob(pattern))
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{count} {pattern} files not written in {timeout}s: {found}")


@pytest.mark.parametrize(
    ("worker", "pod"),
    [
        ("pod-a", "pod-a"),
        ("pod-a#0", "pod-a"),
        ("pod-a#63", "pod-a"),
        ("pod-a#1000", "pod-a#1000"),  # no pod runs that many: nobody speaks for it
        ("pod-a#07", "pod-a#07"),  # one spelling per process
        ("pod-a#x", "pod-a#x"),
        ("pod-a#\u0661", "pod-a#\u0661"),  # an Arabic-Indic one is not a digit here
        ("#1", "#1"),
        ("pod-a#1#2", "pod-a#1"),  # no pod's name holds "#": no token speaks for it
    ],
)
def test_the_pod_a_worker_name_speaks_for(worker: str, pod: str) -> None:
    assert worker_pod(worker) == pod


def test_a_sigterm_goes_to_every_process_running_and_they_are_killed_past_the_drain() -> None:
    pod = PodProcesses(3, drain_seconds=25.0)
    assert pod.overdue(1e9) == []
    assert pod.kill_at is None
    assert pod.drain(100.0) == [0, 1, 2]
    assert pod.ended(1, 0, 101.0) == []  # a drained process ends: nothing more to do
    assert pod.drain(102.0) == [0, 2]  # a second SIGTERM: to those still running
    assert pod.kill_at == 100.0 + 25.0 + KILL_AFTER_DRAIN_MARGIN_SECONDS  # from the first
    assert pod.overdue(129.9) == []
    assert pod.overdue(130.0) == [0, 2]
    assert pod.ended(0, -9, 130.1) == []
    assert pod.ended(2, -9, 130.1) == []
    assert pod.done
    assert pod.status == 128 + 9


def test_a_process_ending_by_itself_drains_the_others_and_sets_the_pods_status() -> None:
    pod = PodProcesses(3, drain_seconds=25.0)
    assert pod.ended(1, 3, 50.0) == [0, 2]  # the pod ends as one
    assert pod.drain_started == 50.0
    assert pod.ended(0, 0, 51.0) == []
    assert pod.ended(2, 2, 52.0) == []
    assert pod.done
    assert pod.status == 3


@pytest.mark.parametrize(
    ("worker", "speaks"),
    [
        ("pod-a", True),  # a worker of any release: the pod's one
        ("pod-a#0", True),
        ("pod-a#63", True),
        ("pod-a#64", False),  # more than any spec gives a pod
        ("pod-a#01", False),
        ("pod-b#0", False),
        ("pod-b", False),
        (None, False),
    ],
)
def test_a_pods_token_speaks_for(worker: str | None, speaks: bool) -> None:
    assert speaks_for("pod-a", worker) is speaks


def beat(consumer: ManagedConsumer, worker: str, now: float, *held: tuple[str, int]) -> Any:
    request = HeartbeatRequest(
        worker=worker, held=[HeldShard(shard_id=s, epoch=e) for s, e in held]
    )
    reply = heartbeat(consumer, request, now)
    assert reply.status == 200, reply
    return reply.body


def test_a_process_the_spec_no_longer_gives_its_pod_hands_off_and_takes_nothing() -> None:
    """A rollout from 4 processes to 2: the old pod's #3 runs on until it is replaced,
    maybe after a new leader rebuilt its workers from the status. It is heard: what it
    holds is handed off, nothing is granted to it, and idle it is not even counted."""
    spec = consumer_spec(processor={"image": "i", "entrypoint": "m:f", "processes": 2})
    coordinator = LeaseCoordinator(spec, DurableState(), now=0.0, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    consumer = fenced_consumer("n", "c", coordinator)
    # It held s0 under the old spec (granted as any worker's, here by the engine itself).
    coordinator.heartbeat(HeartbeatRequest(worker="pod-a#3"), 0.0)
    coordinator.step(0.0)
    coordinator.persisted(coordinator.snapshot(0.0), coordinator.version)
    granted = coordinator.heartbeat(HeartbeatRequest(worker="pod-a#3"), 0.1).assignments
    held = [(a.shard_id, a.epoch) for a in granted]
    assert held, "the engine granted it shards"
    beat(consumer, "pod-a#3", 0.2, *held)  # now draining: the engine hands off
    coordinator.heartbeat(HeartbeatRequest(worker="pod-b#0"), 0.2)
    coordinator.step(0.3)
    coordinator.persisted(coordinator.snapshot(0.3), coordinator.version)
    answer = beat(consumer, "pod-a#3", 0.4, *held)
    assert answer["assignments"] == []
    assert sorted(r["shardId"] for r in answer["revocations"]) == sorted(s for s, _ in held)
    # An idle one is answered and never counted as a worker (no status write for it).
    version = coordinator.version
    assert beat(consumer, "pod-a#2", 0.5) == {
        "leaseDurationMs": int(coordinator.lease_duration * 1000),
        "assignments": [],
        "revocations": [],
    }
    assert "pod-a#2" not in coordinator.workers
    assert coordinator.version == version


def test_each_process_is_a_worker_of_its_own_named_after_the_pod(
    run: Started, tmp_path: Path
) -> None:
    process = supervisor(run, tmp_path, 3, **config(3, metrics_port="9100"))
    said = [json.loads(p.read_text()) for p in wait_for_files(tmp_path, "*.json", 3)]
    names = sorted(env["STREAMCONSUMER_WORKER_NAME"] for env in said)
    assert names == ["pod-a#0", "pod-a#1", "pod-a#2"]
    assert {worker_pod(name) for name in names} == {"pod-a"}  # what the operator checks
    assert {env["STREAMCONSUMER_PROCESSES"] for env in said} == {"1"}  # no supervisor below
    assert sorted(env["STREAMCONSUMER_METRICS_PORT"] for env in said) == ["9101", "9102", "9103"]
    assert {env["STREAMCONSUMER_METRICS_ADDRESS"] for env in said} == {"127.0.0.1"}
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0


def test_a_sigterm_to_the_supervisor_alone_drains_every_process(
    run: Started, tmp_path: Path
) -> None:
    process = supervisor(run, tmp_path, 2)
    wait_for_files(tmp_path, "*.json", 2)
    os.kill(process.pid, signal.SIGTERM)  # as a container runtime: the main process only
    assert process.wait(20) == 0
    assert sorted(p.name for p in tmp_path.glob("*.drained")) == [
        "pod-a#0.drained",
        "pod-a#1.drained",
    ]


def test_a_process_that_ends_by_itself_drains_the_others_and_ends_the_pod(
    run: Started, tmp_path: Path
) -> None:
    process = supervisor(run, tmp_path, 3, ENDS="#1")
    assert process.wait(20) == 3  # its status, so the kubelet restarts the container
    drained = sorted(p.name for p in tmp_path.glob("*.drained"))
    assert drained == ["pod-a#0.drained", "pod-a#2.drained"]  # handed off, not killed


def test_a_process_frozen_in_its_drain_is_killed_after_the_drain_time(
    run: Started, tmp_path: Path
) -> None:
    process = supervisor(run, tmp_path, 2, FROZEN="#1")
    wait_for_files(tmp_path, "*.json", 2)
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 128 + signal.SIGKILL
    took = time.monotonic() - began
    assert took >= 0.5 + KILL_AFTER_DRAIN_MARGIN_SECONDS - 0.5, took
    assert [p.name for p in tmp_path.glob("*.drained")] == ["pod-a#0.drained"]


def test_processes_of_a_killed_supervisor_hand_off_and_end(run: Started, tmp_path: Path) -> None:
    process = supervisor(run, tmp_path, 2)
    wait_for_files(tmp_path, "*.json", 2)
    process.kill()  # outside a container nothing else would end them
    process.wait()
    assert len(wait_for_files(tmp_path, "*.drained", 2)) == 2


def _process_server(records: int) -> int:
    registry = CollectorRegistry()
    counter = Counter(
        "streamconsumer_worker_records", "Records processed.", ["shard"], registry=registry
    )
    counter.labels(f"shard-{records}").inc(records)
    port = free_port()
    start_http_server(port, "127.0.0.1", registry=registry)
    return port


class _Odd(http.server.BaseHTTPRequestHandler):
    """A process' port answering badly: an error page, or nothing for a long while."""

    def do_GET(self) -> None:
        if self.headers.get("Host", "").rpartition(":")[2] in _HANGING:
            time.sleep(SCRAPE_DEADLINE_SECONDS + 3)
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html>not found</html>")

    def log_message(self, *_: object) -> None:
        pass


_HANGING: set[str] = set()  # ports, as a request's Host names them


def _odd_server(hangs: bool) -> tuple[int, http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    port = server.server_port
    if hangs:
        _HANGING.add(str(port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return port, server


def scraped(ports: list[int]) -> tuple[dict[tuple[str, str], float], dict[str, float], float]:
    """The records series by (process, shard), `up` by process, and the scrape's seconds."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessMetrics(ports))
    began = time.monotonic()
    text = generate_latest(registry).decode()
    took = time.monotonic() - began
    records, up = {}, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamconsumer_worker_records_total":
                records[(sample.labels[PROCESS_LABEL], sample.labels["shard"])] = sample.value
            if sample.name == UP:
                up[sample.labels[PROCESS_LABEL]] = sample.value
    assert text.count("# TYPE streamconsumer_worker_records_total counter") <= 1
    return records, up, took


def test_the_pods_metrics_are_every_process_metrics_labelled_by_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy in the processor's env is not asked for the pod's own ports.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")
    ports = [_process_server(5), free_port(), _process_server(7)]  # #1 is not up (yet)
    records, up, _ = scraped(ports)
    assert records == {("0", "shard-5"): 5.0, ("2", "shard-7"): 7.0}
    assert up == {"0": 1.0, "1": 0.0, "2": 1.0}


def test_a_process_answering_badly_or_late_leaves_the_others_served_in_time() -> None:
    error_page, error_server = _odd_server(hangs=False)
    hung, hung_server = _odd_server(hangs=True)
    try:
        ports = [_process_server(5), error_page, *[hung] * 3, _process_server(7)]
        records, up, took = scraped(ports)
    finally:
        for server in (error_server, hung_server):
            server.shutdown()
    assert records == {("0", "shard-5"): 5.0, ("5", "shard-7"): 7.0}
    assert up == {"0": 1.0, "1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0, "5": 1.0}
    assert took < 2 * SCRAPE_DEADLINE_SECONDS  # three hung processes: waited for at once


def test_scrapes_at_once_wait_on_the_same_reads_not_on_each_other() -> None:
    """Two Prometheus servers scrape each pod; with a process answering late, a scrape
    that queued behind another's deadline would outlive its own scrape timeout."""
    hung, hung_server = _odd_server(hangs=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessMetrics([_process_server(5), hung]))
    took: list[float] = []

    def scrape() -> None:
        began = time.monotonic()
        generate_latest(registry)
        took.append(time.monotonic() - began)

    try:
        scrapes = [threading.Thread(target=scrape) for _ in range(3)]
        for one in scrapes:
            one.start()
        for one in scrapes:
            one.join(4 * SCRAPE_DEADLINE_SECONDS)
    finally:
        hung_server.shutdown()
    assert len(took) == 3
    assert max(took) < 1.5 * SCRAPE_DEADLINE_SECONDS, took
