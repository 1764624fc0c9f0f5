"""Runs the real operator (`python -m streamconsumer.controller`) as a process against the
local control plane. It campaigns for a Lease in the test's namespace like in a cluster,
with short timings so a killed leader is replaced within seconds."""

from __future__ import annotations

import ssl
import sys
import urllib.request
from pathlib import Path

from testbed.processes import Server, free_port

LEADER_LEASE_SECONDS = 4.0


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        workdir: Path,
        port: int | None = None,
        env: dict[str, str] | None = None,
        tls: bool = False,
    ) -> None:
        self.port = port or free_port()
        # TLS: the operator serves HTTPS from a CA it keeps in a Secret of `namespace`.
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._argv = [
            sys.executable,
            "-m",
            "streamconsumer.controller",
            f"--namespace={namespace}",
        ]
        self._env = {
            "KUBECONFIG": str(kubeconfig),
            "STREAMCONSUMER_API_HOST": "127.0.0.1",
            "STREAMCONSUMER_API_PORT": str(self.port),
            "STREAMCONSUMER_API_URL": self.url,
            "STREAMCONSUMER_NAMESPACE": namespace,
            "STREAMCONSUMER_SHARD_SYNC_SECONDS": "1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "STREAMCONSUMER_LEADER_LEASE_SECONDS": str(LEADER_LEASE_SECONDS),
            "STREAMCONSUMER_LEADER_RENEW_DEADLINE_SECONDS": "3",
            "STREAMCONSUMER_LEADER_RETRY_SECONDS": "0.5",
            **(env or {}),
        }
        self._workdir = workdir
        self.server: Server | None = None

    def start(self) -> OperatorProcess:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.server = Server("operator", self._argv, self._workdir, self._env)
        self.server.wait_until(self._healthy, 60, "serving the worker API")
        return self

    def _healthy(self) -> bool:
        # Liveness only, as a kubelet probes: trust is what the tests check, elsewhere.
        unverified = ssl.create_default_context()
        unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
        with urllib.request.urlopen(
            f"{self.url}/healthz", timeout=1, context=unverified
        ) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
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
