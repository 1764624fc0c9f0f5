"""What a real node could leave behind on the machine, captured before and compared after:
mounts, network links, addresses, routes and iptables rules, the kernel settings the
kubelet and kube-proxy write, top-level cgroups, and the fixed directories node
components use (/run, /var/lib, /var/log, /etc/cni, /opt)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testbed.netns import KERNEL_SETTINGS

# The kubelet's (in a node's namespaces, each a file of ours), then kube-proxy's.
SETTINGS = (
    *KERNEL_SETTINGS,
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/netfilter/nf_conntrack_max",
)
DIRECTORIES = ("/run", "/run/mount", "/var/lib", "/var/log", "/etc/cni", "/opt", "/var/tmp")


def _output(*argv: str) -> list[str]:
    if not shutil.which(argv[0]):
        return []
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return result.stdout.splitlines()


def _iptables() -> list[str]:
    # Packet counters change by themselves; the rules are what matters.
    return [line.split(" [")[0] for line in _output("iptables-save") if not line.startswith("#")]


def snapshot() -> dict[str, list[str]]:
    state: dict[str, list[str]] = {
        "mounts": sorted(line.split()[4] for line in _output("cat", "/proc/self/mountinfo")),
        "links": sorted(line.split(":")[1].strip() for line in _output("ip", "-o", "link")),
        "addresses": sorted(_output("ip", "-o", "addr")),
        "routes": sorted(_output("ip", "route")),
        "iptables": _iptables(),
        "settings": [
            f"{name}={Path('/proc/sys', name).read_text().strip()}"
            for name in SETTINGS
            if Path("/proc/sys", name).exists()
        ],
        "cgroups": sorted(
            str(path) for path in Path("/sys/fs/cgroup").glob("*/*") if path.is_dir()
        ),
    }
    for directory in DIRECTORIES:
        path = Path(directory)
        state[directory] = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    return state


def differences(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """Human-readable lines for what changed; empty when nothing did."""
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = set(before.get(key, [])), set(after.get(key, []))
        lines += [f"{key}: + {item}" for item in sorted(new - old)]
        lines += [f"{key}: - {item}" for item in sorted(old - new)]
    return lines
