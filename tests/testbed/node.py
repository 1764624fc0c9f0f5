"""A real Kubernetes node for the test control plane: containerd + runc run the pods,
the kubelet manages them, kube-scheduler places them and kube-proxy makes Services work.

Where each part runs (netns.py has the namespaces):
- on the machine, on loopback: the control plane, kube-scheduler, and a forwarder that
  lets the node reach the apiserver at <its address>:<port> from inside its namespace;
- in the node's network and mount namespaces: containerd, the kubelet, kube-proxy, the
  pods (CNI bridge, nodeconfig.POD_CIDR), and what a test starts there (an emulator).
All state lives under the work directory, the pods' cgroups under a cgroup root of the
node's own (cgroups.py). `stop()` stops every process by PID and removes the cgroups.

Run `python -m testbed.node` for a node and its control plane in the foreground."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from testbed import cgroups, images, nodeconfig, podman
from testbed.controlplane import ControlPlane
from testbed.netns import NodeNamespaces
from testbed.processes import Server, free_port, serve_until_one_exits, stopped_on_failure

_BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "node" / "build.sh"
# What pods run (worker-spark comes inside clickstream-spark, its layers included).
ON_NODE = (
    "operator",
    "worker",
    "clickstream",
    "clickstream-spark",
    "kinesis-local",  # the quickstart's (tests/realnode/test_quickstart.py)
    # Release N-1 (tests/releases/), for tests/realnode/test_chart_upgrade_previous_images.py
    "operator-previous",
    "clickstream-previous",
)


def node_binaries() -> Path:
    """The directory with kubelet, kube-scheduler, kube-proxy and pause, built from the
    pinned Go modules the first time (progress on stderr)."""
    result = subprocess.run(
        [str(_BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True
    )
    return Path(result.stdout.strip().splitlines()[-1])


def apiserver_args(node_ip: str, pki_dir: Path) -> list[str]:
    """What the apiserver needs for this node: the `kubernetes` Service's endpoint on the
    node's address (where the forwarder listens), and credentials to call the kubelet."""
    return [
        f"--advertise-address={node_ip}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki_dir / 'admin.crt'}",
        f"--kubelet-client-key={pki_dir / 'admin.key'}",
    ]


@dataclass
class Node:
    name: str
    plane: ControlPlane
    spaces: NodeNamespaces
    servers: list[Server] = field(default_factory=list)

    @property
    def ip(self) -> str:
        return self.spaces.node_ip

    @property
    def workdir(self) -> Path:
        return self.spaces.workdir

    @property
    def cgroup_root(self) -> str:
        return f"/streamconsumer-{self.name}"

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @classmethod
    def start(
        cls, plane: ControlPlane, spaces: NodeNamespaces, bin_dir: Path, pause_image: str
    ) -> Node:
        """Starts the node in `spaces` (made before the control plane, which advertises
        the node's address) and waits until it is Ready."""
        node = cls(f"node-{uuid.uuid4().hex[:6]}", plane, spaces)
        with stopped_on_failure(node.stop):
            node._start(bin_dir, pause_image)
        return node

    def _start(self, bin_dir: Path, pause_image: str) -> None:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        self._start_forwarder(logs)
        cgroups.create(self.cgroup_root)
        self._start_containerd(logs, pause_image)
        kubelet = self._start_kubelet(logs, bin_dir)
        self._start_proxy(logs, bin_dir)
        self._start_scheduler(logs, bin_dir)
        kubelet.wait_until(self._ready, 60, "reporting the node Ready")

    def _server(self, name: str, argv: list[str], logs: Path, inside: bool = True) -> Server:
        server = Server(name, self.spaces.enter(argv) if inside else argv, logs)
        self.servers.append(server)
        return server

    def _start_forwarder(self, logs: Path) -> None:
        port = self.plane.apiserver_port
        forwarder = self._server(
            "apiserver-forwarder",
            [
                sys.executable,
                str(Path(__file__).with_name("nsforward.py")),  # a script: stdlib only
                str(self.spaces.netns_path),
                f"0.0.0.0:{port}",
                f"127.0.0.1:{port}",
            ],
            logs,
            inside=False,
        )
        forwarder.wait_until(lambda: "forwarding" in forwarder.log_tail(), 10, "listening")

    def _start_containerd(self, logs: Path, pause_image: str) -> None:
        root = self.workdir / "containerd"
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-node.conflist").write_text(json.dumps(nodeconfig.cni(cni / "ipam")))
        config = root / "config.toml"
        root.mkdir(exist_ok=True)
        config.write_text(nodeconfig.containerd(root, self.socket, cni / "net.d", pause_image))
        containerd = self._server("containerd", ["containerd", f"--config={config}"], logs)
        containerd.wait_until(lambda: self.ctr("version").returncode == 0, 30, "serving")
        self.import_images([pause_image])

    def _start_kubelet(self, logs: Path, bin_dir: Path) -> Server:
        config = self.workdir / "kubelet.json"
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("")  # no cluster DNS here: pods get addresses by environment
        document = nodeconfig.kubelet(
            self.ip, self.socket, self.cgroup_root, resolv, self.plane.pki.ca_cert
        )
        config.write_text(json.dumps(document, indent=2))
        return self._server(
            "kubelet",
            [
                str(bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                # Paths inside the mount namespace: /var/lib is the node's own there.
                "--root-dir=/var/lib/kubelet",
                "--cert-dir=/var/lib/kubelet/pki",
                "--v=1",
            ],
            logs,
        )

    def _start_proxy(self, logs: Path, bin_dir: Path) -> None:
        config = self.workdir / "kube-proxy.json"
        document = nodeconfig.kube_proxy(self.name, self.ip, self.plane.kubeconfig)
        config.write_text(json.dumps(document, indent=2))
        self._server("kube-proxy", [str(bin_dir / "kube-proxy"), f"--config={config}"], logs)

    def _start_scheduler(self, logs: Path, bin_dir: Path) -> None:
        kubeconfig = str(self.plane.kubeconfig)
        argv = [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
        ]
        self._server("kube-scheduler", argv, logs, inside=False)

    def _ready(self) -> bool:
        jsonpath = '{.status.conditions[?(@.type=="Ready")].status}'
        result = self.plane.kubectl("get", "node", self.name, "-o", f"jsonpath={jsonpath}")
        return result.stdout == "True"

    def ctr(self, *args: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
        """containerd's own client, on the node's socket (reachable from the machine)."""
        return subprocess.run(
            ["ctr", f"--address={self.socket}", "--namespace=k8s.io", *args],
            stdin=stdin,
            capture_output=True,
            text=True,
            check=False,
        )

    def import_images(self, references: list[str]) -> None:
        """podman save | ctr import: the kubelet then finds them and never pulls."""
        save = podman.pipe_save(references)
        assert save.stdout is not None
        imported = self.ctr("images", "import", "-", stdin=save.stdout.fileno())
        _, save_errors = save.communicate()
        if save.returncode != 0 or imported.returncode != 0:
            raise RuntimeError(f"importing {references}: {save_errors!r} {imported.stderr}")

    def container_pids(self, container_id: str) -> set[int]:
        """The processes of a running container (its ID without `containerd://`)."""
        return cgroups.pids(self.cgroup_root, leaf=container_id)

    def log_dir(self) -> Path:
        """The kubelet's pod logs (/var/log/pods in the node), as the machine sees them."""
        return self.spaces.private("/var/log") / "pods"

    def stop(self) -> None:
        """Stops every process of the node by PID, then frees its namespaces and cgroups."""
        servers = {server.name: server for server in self.servers}
        for name in ("kube-scheduler", "kubelet", "kube-proxy"):
            if name in servers:
                servers[name].stop()
        cgroups.kill(self.cgroup_root)  # the containers
        for name in ("containerd", "apiserver-forwarder"):
            if name in servers:
                servers[name].stop()
        self._kill_shims()
        self.spaces.destroy()
        self.servers.clear()
        cgroups.remove(self.cgroup_root)

    def _kill_shims(self) -> None:
        """containerd's shims outlive it by design; each wrote its PID in its bundle."""
        tasks = self.workdir / "containerd" / "state" / "io.containerd.runtime.v2.task"
        for pid_file in tasks.glob("*/*/shim.pid"):
            with suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)


@dataclass
class Cluster:
    """A control plane and one node with our images, started together (the apiserver
    advertises the node's address, so the node's namespaces come first)."""

    plane: ControlPlane
    node: Node
    images: dict[str, str]

    @classmethod
    def start(cls, workdir: Path) -> Cluster:
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "image-builds.log"
        bin_dir = node_binaries()
        refs = images.build_all(log)
        refs["pause"] = images.pause_image(bin_dir / "pause", log)
        spaces = NodeNamespaces.create(workdir / "node", uuid.uuid4().hex[:8])
        plane: ControlPlane | None = None
        node: Node | None = None
        try:
            plane_dir = workdir / "control-plane"
            args = apiserver_args(spaces.node_ip, plane_dir / "pki")
            plane = ControlPlane.start(plane_dir, apiserver_args=args, real_nodes=True)
            node = Node.start(plane, spaces, bin_dir, refs["pause"])
            started = time.monotonic()
            node.import_images([refs[name] for name in ON_NODE])
            print(f"[node] images imported in {time.monotonic() - started:.0f}s", file=sys.stderr)
        except BaseException:
            if node:
                node.stop()
            if plane:
                plane.stop()
            spaces.destroy()
            raise
        return cls(plane, node, refs)

    def stop(self) -> None:
        try:
            self.node.stop()
        finally:
            self.plane.stop()


def main() -> None:
    # Ctrl-C and a plain kill both stop the node cleanly (a shell's background job starts
    # with SIGINT ignored, which would leave Ctrl-C's KeyboardInterrupt unraised).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print("Starting a control plane and a real node...", file=sys.stderr)
    workdir = Path(tempfile.mkdtemp(prefix="streamconsumer-node-"))
    cluster = Cluster.start(workdir)
    node = cluster.node
    print(f"Node {node.name} Ready at {node.ip}\n  export KUBECONFIG={cluster.plane.kubeconfig}")
    print(f"  kubectl: {cluster.plane.bin_dir / 'kubectl'}")
    for name in (*ON_NODE, "pause"):
        print(f"  image {name}: {cluster.images[name]}")
    print("Ctrl-C stops it.")
    try:
        serve_until_one_exits(node.servers, "node")
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
