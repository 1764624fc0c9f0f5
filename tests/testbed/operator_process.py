"""Runs the real operator (`python -m streamconsumer.controller`) as a process against the
local control plane. It campaigns for a Lease in the test's namespace like in a cluster,
with short timings so a killed leader is replaced within seconds. It starts through
testbed.launch, so its log says which streamconsumer package it runs: this checkout's, or
another release's (`code`, first on its PYTHONPATH; tests/e2e/test_upgrade.py)."""

from __future__ import annotations

import os
import signal
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from streamconsumer.controller.aws.access import AccessPolicy
from testbed.processes import Server, free_port
from testbed.specs import TEST_BED_ACCESS

LEADER_LEASE_SECONDS = 4.0
TESTS_DIR = Path(__file__).resolve().parents[1]


LEASE_GROUPS_PAST_TWO = {
    "STREAMCONSUMER_LEASE_GROUPS_AFTER": "2",
    "STREAMCONSUMER_LEASE_GROUPS": "3",
    "STREAMCONSUMER_LEASE_LOG_GROUP_SHARDS": "1",  # a log's base in 3 groups, too
}
"""Operator settings that keep a table past 2 entries in 3 lease groups (tests of them)."""


def _access_env(policy: AccessPolicy | None) -> dict[str, str]:
    """The operator's STREAMCONSUMER_AWS_ACCESS; none for None (the chart's default). The
    fields left at their defaults are left out: the previous release reads it too
    (tests/e2e/test_upgrade.py) and refuses fields it does not know."""
    if policy is None:
        return {}
    given = policy.model_dump_json(by_alias=True, exclude_defaults=True)
    return {"STREAMCONSUMER_AWS_ACCESS": given}


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        workdir: Path,
        port: int | None = None,
        env: dict[str, str] | None = None,
        tls: bool = False,
        code: Path | None = None,
        also_watched: Sequence[str] = (),
        aws_access: AccessPolicy | None = TEST_BED_ACCESS,
    ) -> None:
        self.port = port or free_port()
        # TLS: the operator serves HTTPS from a CA it keeps in a Secret of `namespace`.
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        # Prometheus' /metrics: plain HTTP, on a port of its own.
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # The kubelet's probes: plain HTTP, on a port of their own.
        self.probe_port = free_port()
        self.code = code  # None: this checkout's package
        pythonpath = [str(p) for p in (code, TESTS_DIR) if p is not None]
        self._argv = [
            sys.executable,
            "-m",
            "testbed.launch",
            "streamconsumer.controller",
            f"--namespace={namespace}",
            *(f"--namespace={other}" for other in also_watched),
        ]
        self._env = {
            "KUBECONFIG": str(kubeconfig),
            "STREAMCONSUMER_API_HOST": "127.0.0.1",
            "STREAMCONSUMER_API_PORT": str(self.port),
            "STREAMCONSUMER_METRICS_PORT": str(self.metrics_port),
            "STREAMCONSUMER_PROBE_PORT": str(self.probe_port),
            "STREAMCONSUMER_API_URL": self.url,
            "STREAMCONSUMER_NAMESPACE": namespace,
            "STREAMCONSUMER_SHARD_SYNC_SECONDS": "1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "STREAMCONSUMER_LEADER_LEASE_SECONDS": str(LEADER_LEASE_SECONDS),
            "STREAMCONSUMER_LEADER_RENEW_DEADLINE_SECONDS": "3",
            "STREAMCONSUMER_LEADER_RETRY_SECONDS": "0.5",
            **_access_env(aws_access),
            "PYTHONPATH": os.pathsep.join(
                [*pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            **(env or {}),
        }
        self._workdir = workdir
        self.server: Server | None = None
        self._paused = False

    def start(self) -> OperatorProcess:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.server = Server("operator", self._argv, self._workdir, self._env)
        self.server.wait_until(self._healthy, 60, "serving the worker API")
        return self

    @property
    def log_path(self) -> Path:
        return self._workdir / "operator.log"

    def _open(self, path: str, data: bytes | None = None) -> tuple[int, bytes]:
        """GET (POST with `data`); raises urllib.error.HTTPError on an error status."""
        # Probes only, as a kubelet or Prometheus would: trust is what tests check elsewhere.
        unverified = ssl.create_default_context()
        unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
        request = urllib.request.Request(f"{self.url}{path}", data=data)
        with urllib.request.urlopen(request, timeout=1, context=unverified) as response:
            return response.status, response.read()

    def _healthy(self) -> bool:
        return self._open("/healthz")[0] == 200

    def metric(self, sample: str, **labels: str) -> float | None:
        """The sum of the samples named `sample` (e.g. "streamconsumer_status_writes_total")
        whose labels include `labels`; None if the process does not answer."""
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=1) as response:
                body = response.read()
        except OSError:
            return None
        return sum(
            point.value
            for family in text_string_to_metric_families(body.decode())
            for point in family.samples
            if point.name == sample and labels.items() <= point.labels.items()
        )

    def takes_worker_calls(self, namespace: str, consumer: str) -> bool | None:
        """Whether its worker API would take a worker's call: a leader answers a call
        without a token 401, a standby (or a leader whose term ran out) 503 at once.
        None if the process does not answer."""
        try:
            self._open(f"/v1/namespaces/{namespace}/streamconsumers/{consumer}/heartbeat", b"{}")
            return True
        except urllib.error.HTTPError as error:
            return error.code != 503
        except OSError:
            return None

    @property
    def pid(self) -> int:
        assert self.server is not None, "not running"
        return self.server.pid

    def exit_code(self) -> int | None:
        """None while the process runs (or is paused)."""
        assert self.server is not None, "not running"
        return self.server.process.poll()

    def pause(self) -> None:
        """SIGSTOP: the whole process freezes mid-step, as in a long GC pause or a stalled
        VM, its sockets open and its Lease unrenewed, until `resume`."""
        os.kill(self.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT: it carries on from where it froze, its clocks jumped ahead."""
        os.kill(self.pid, signal.SIGCONT)
        self._paused = False

    def stop(self) -> None:
        if self._paused and self.exit_code() is None:  # stopped, it would sit on SIGTERM
            self.resume()
        if self.server is not None:
            self.server.stop()
            self.server = None

    def terminate(self) -> None:
        """SIGTERM, as to a pod being deleted; `stop` then waits for the exit."""
        if self.server is not None:
            self.server.terminate()

    def kill(self) -> None:
        """A crash: SIGKILL, no cleanup."""
        if self.server is not None:
            self.server.process.kill()
            self.server.process.wait()
            self.server.stop()
            self.server = None
