"""The node's own network and mount namespaces, so that it leaves the machine as it was.

A holder process (`unshare --net --mount`) keeps the two namespaces alive; every node
process is started inside them with nsenter (which execs: the PID we hold is the
process's own). In the mount namespace:
- /proc/sys files the kubelet writes (panic, overcommit, ...) are files of ours;
- /run, /var/lib and /var/log are directories of ours (the kubelet, containerd and the
  CNI plugins keep a few fixed paths there);
- /sys is a sysfs of the new network namespace, as `ip netns exec` mounts it.
In the network namespace: a veth to the machine (the node's address; the machine's end
has the other address of a /30), the CNI bridge, iptables rules, pods.

When the holder and the processes in them are gone, both namespaces are freed by the
kernel with everything in them: addresses, routes, rules, the veth pair, mounts."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.processes import Server, stopped_on_failure

# The kubelet sets these (protectKernelDefaults: false); each gets a file of ours.
KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# Directories where node components keep fixed paths, replaced by ours in the namespace.
PRIVATE_DIRS = ("/run", "/var/lib", "/var/log")
# 198.18.0.0/15 is reserved for network testing: it clashes with no real network.
TEST_NET = ipaddress.IPv4Network("198.18.0.0/15")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")


def _run(argv: Sequence[str]) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A random /30 of TEST_NET in a /24 that no address or route of the machine is in."""
    listed = _run(["ip", "-4", "-o", "addr"]) + _run(["ip", "-4", "route"])
    used = {ipaddress.IPv4Network(f"{a}/24", strict=False) for a in _IPV4.findall(listed)}
    for _ in range(64):
        offset = random.randrange(TEST_NET.num_addresses // 4) * 4
        subnet = ipaddress.IPv4Network((int(TEST_NET.network_address) + offset, 30))
        if subnet.supernet(new_prefix=24) not in used:
            return subnet
    raise RuntimeError(f"no free /30 in {TEST_NET}")


def wait_until_unshared(holder: Server) -> None:
    """Waits until `holder`, an unshare whose command ends by exec'ing sleep, is in
    namespaces of its own: it is once sleep runs in a network namespace not ours."""
    own = os.stat("/proc/self/ns/net").st_ino
    holder.wait_until(
        lambda: (
            os.stat(f"/proc/{holder.pid}/ns/net").st_ino != own
            and Path(f"/proc/{holder.pid}/comm").read_text().strip() == "sleep"
        ),
        10,
        "in its namespaces",
    )


@dataclass
class NodeNamespaces:
    workdir: Path
    holder: Server
    host_if: str
    host_ip: str
    node_ip: str

    @classmethod
    def create(cls, workdir: Path, name: str) -> NodeNamespaces:
        workdir.mkdir(parents=True, exist_ok=True)
        holder = Server(
            "netns-holder",
            ["unshare", "--net", "--mount", "--propagation=private", "sleep", "infinity"],
            workdir,
        )
        subnet = _free_subnet()
        host_ip, node_ip = (str(h) for h in subnet.hosts())
        spaces = cls(workdir, holder, f"sc{name[-8:]}", host_ip, node_ip)
        with stopped_on_failure(spaces.destroy):
            wait_until_unshared(holder)
            spaces._mounts()
            spaces._network(subnet.prefixlen)
        return spaces

    @property
    def pid(self) -> int:
        return self.holder.pid

    @property
    def netns_path(self) -> Path:
        return Path(f"/proc/{self.pid}/ns/net")

    def enter(self, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` inside the node's namespaces."""
        return ["nsenter", f"--target={self.pid}", "--net", "--mount", "--", *argv]

    def run(self, *argv: str) -> str:
        return _run(self.enter(argv))

    def _mounts(self) -> None:
        keep = self.workdir / "cgroup-keep"
        keep.mkdir(exist_ok=True)
        # -n: mount(8) must not record these in the machine's /run/mount/utab.
        script = [
            # A sysfs of the new network namespace, keeping the machine's cgroup mounts.
            f"mount -n --rbind /sys/fs/cgroup {keep}",
            "mount -n -t sysfs sysfs /sys",
            f"mount -n --move {keep} /sys/fs/cgroup",
        ]
        for setting in KERNEL_SETTINGS:
            fake = self.workdir / "sysctl" / setting.replace("/", ".")
            fake.parent.mkdir(exist_ok=True)
            fake.write_text(Path("/proc/sys", setting).read_text())
            script.append(f"mount -n --bind {fake} /proc/sys/{setting}")
        for directory in PRIVATE_DIRS:
            ours = self.private(directory)
            ours.mkdir(parents=True, exist_ok=True)
            script.append(f"mount -n --bind {ours} {directory}")
        self.run("sh", "-euc", " && ".join(script))

    def private(self, directory: str) -> Path:
        """Where a directory of the namespace's (e.g. /var/lib) is on the machine."""
        return self.workdir / "root" / directory.strip("/")

    def _network(self, prefix: int) -> None:
        peer = f"ip link add {self.host_if} type veth peer name eth0 netns {self.pid}"
        _run(peer.split())
        _run(f"ip addr add {self.host_ip}/{prefix} dev {self.host_if}".split())
        _run(f"ip link set {self.host_if} up".split())
        self.run("ip", "link", "set", "lo", "up")
        self.run(*f"ip addr add {self.node_ip}/{prefix} dev eth0".split())
        self.run("ip", "link", "set", "eth0", "up")

    def processes(self) -> list[int]:
        """PIDs of every process in the node's network namespace (containers have their
        own: these are the node's processes), by reading /proc."""
        try:
            ours = os.stat(self.netns_path).st_ino
        except FileNotFoundError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.stat(entry / "ns" / "net").st_ino == ours:
                        found.append(int(entry.name))
                except (FileNotFoundError, PermissionError, ProcessLookupError):
                    continue
        return found

    def destroy(self, timeout: float = 10.0) -> None:
        """Kills whatever is left in the namespaces (by PID), then the holder; the kernel
        then frees both namespaces and all that is in them."""
        for pid in self.processes():
            if pid != self.pid:
                _kill(pid)
        self.holder.stop()
        deadline = time.monotonic() + timeout
        while _link_exists(self.host_if) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _link_exists(self.host_if):
            raise RuntimeError(f"the node's veth {self.host_if} outlived its namespace")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()
