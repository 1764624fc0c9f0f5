"""A real local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager
on free loopback ports, with an admin kubeconfig and a service-account key pair (so
TokenRequest and TokenReview work). There is no scheduler and no kubelet: Pods are
created by the controllers and stay Pending unless a test runs them.

Run `python -m testbed.controlplane` for a control plane in the foreground."""

from __future__ import annotations

import ipaddress
import json
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.pki import Pki, create_pki
from testbed.processes import Server, free_port, serve_until_one_exits, stopped_on_failure

_BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "controlplane" / "build.sh"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
# The `kubernetes` Service's cluster IP: pods reach the apiserver there.
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))


def control_plane_binaries() -> Path:
    """The directory with etcd, kube-apiserver, kube-controller-manager and kubectl.

    Builds them from the pinned Go modules the first time (progress on stderr)."""
    result = subprocess.run(
        [str(_BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True
    )
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass
class ControlPlane:
    workdir: Path
    bin_dir: Path
    pki: Pki
    apiserver_port: int
    kubeconfig: Path
    servers: list[Server] = field(default_factory=list)
    apiserver_args: tuple[str, ...] = ()
    real_nodes: bool = False
    etcd_url: str = ""  # its clients' URL, which serves its /metrics too

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        bin_dir: Path | None = None,
        apiserver_args: Sequence[str] = (),
        real_nodes: bool = False,
    ) -> ControlPlane:
        """`apiserver_args` come after the defaults, so they may override them (a real
        node needs another advertised address and kubelet credentials: testbed.node).
        `real_nodes`: its nodes are kubelets that post heartbeats (testbed.node), not the
        process kubelet's stand-ins."""
        workdir = workdir or Path(tempfile.mkdtemp(prefix="streamconsumer-cp-"))
        bin_dir = bin_dir or control_plane_binaries()
        logs = workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        plane = cls(
            workdir=workdir,
            bin_dir=bin_dir,
            pki=create_pki(workdir / "pki", extra_ips=[KUBERNETES_SERVICE_IP]),
            apiserver_port=free_port(),
            kubeconfig=workdir / "admin.kubeconfig",
            apiserver_args=tuple(apiserver_args),
            real_nodes=real_nodes,
        )
        with stopped_on_failure(plane.stop):
            plane._start_etcd_and_apiserver(logs)
            plane._write_kubeconfig()
            plane._start_controller_manager(logs)
        return plane

    def _serve(
        self,
        binary: str,
        args: list[str],
        logs: Path,
        ready: Callable[[], bool],
        timeout: float,
        what: str,
    ) -> None:
        """Starts `binary` of bin_dir with `args`, one of the servers stop() stops, and
        waits until `ready()` (`what` it is then)."""
        server = Server(binary, [str(self.bin_dir / binary), *args], logs)
        self.servers.append(server)
        server.wait_until(ready, timeout, what)

    def _start_etcd_and_apiserver(self, logs: Path) -> None:
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._serve(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",  # tests do not need durability across power loss
                "--log-level=warn",
            ],
            logs,
            lambda: _http_ok(f"{etcd_url}/health"),
            30,
            "healthy",
        )

        pki = self.pki
        self._serve(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                f"--secure-port={self.apiserver_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--v=0",
                *self.apiserver_args,
            ],
            logs,
            self._readyz,
            90,
            "ready",
        )

    def _start_controller_manager(self, logs: Path) -> None:
        pki = self.pki
        kubeconfig = str(self.kubeconfig)
        self._serve(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                # The process kubelet's nodes post no heartbeats: they must not be tainted
                # and their pods evicted as unreachable. A real kubelet's node needs the
                # controller: it lifts the not-ready taint the node registers with, and
                # without it nothing is ever scheduled there.
                "--controllers=" + ("*" if self.real_nodes else "*,-node-lifecycle-controller"),
                "--v=0",
            ],
            logs,
            self._default_service_account_exists,
            60,
            "creating ServiceAccounts",
        )

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.pki.admin_cert),
                        "client-key": str(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def get(self, path: str) -> tuple[int, bytes]:
        """An admin GET on the apiserver (for readiness checks)."""
        request = urllib.request.Request(self.url + path)
        with urllib.request.urlopen(request, context=self._ssl_context(), timeout=5) as response:
            return response.status, response.read()

    def _readyz(self) -> bool:
        status, body = self.get("/readyz")
        return status == 200 and body == b"ok"

    def _default_service_account_exists(self) -> bool:
        status, _ = self.get("/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs the built kubectl against this control plane; never raises on failure."""
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def main() -> None:
    print("Starting a local control plane...", file=sys.stderr)
    plane = ControlPlane.start()
    print(f"Ready at {plane.url}\n  export KUBECONFIG={plane.kubeconfig}")
    print(f"  kubectl: {plane.bin_dir / 'kubectl'}\nCtrl-C stops it.")
    try:
        serve_until_one_exits(plane.servers, "control-plane")
    finally:
        plane.remove()


if __name__ == "__main__":
    main()
