"""The configuration files of the node's parts (pure: values in, documents out). Each
setting that departs from the defaults says why; most are what this machine needs
(REAL_NODE.md: cgroup v1, no CAP_SYS_RESOURCE, no registry) or keep the machine as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

POD_CIDR = "10.244.0.0/24"
Document = dict[str, Any]


def cni(ipam_dir: Path) -> Document:
    return {
        "cniVersion": "1.0.0",
        "name": "node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,  # pods reach nothing beyond the node
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd(root: Path, socket: Path, cni_conf_dir: Path, pause_image: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
# opt would create /opt/containerd; the others are snapshotters nobody uses here.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[{cri}]
  # Our pause program: no registry to pull one from.
  sandbox_image = "{pause_image}"
  # No CAP_SYS_RESOURCE on this machine: never set an OOM score below our own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf_dir}"
"""


def kubelet(
    node_ip: str, runtime_socket: Path, cgroup_root: str, resolv_conf: Path, client_ca: Path
) -> Document:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        # The apiserver calls it (logs, exec) with the admin client certificate.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,  # this machine is cgroup v1 (hybrid); 1.34 only warns
        "failSwapOn": False,
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE: it cannot lower its own
        "protectKernelDefaults": False,  # it writes /proc/sys files netns.py replaced
        "resolvConf": str(resolv_conf),
        # Never evict for disk, never collect our images: nothing could pull them again.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }


def kube_proxy(node_name: str, node_ip: str, kubeconfig: Path) -> Document:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "bindAddress": node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Zeros: leave the machine-wide conntrack settings alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # Without br_netfilter here, a pod reaching a Service backed by a pod on the same
        # bridge gets its replies back through conntrack only if masqueraded.
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
    }
