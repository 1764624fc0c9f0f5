"""Our images and a worker container on a real node (testbed.node):

- image sizes (uncompressed layers, as `podman images` shows them): the worker, the Spark
  worker and the operator, beside the bookworm base image they are all built FROM;
- the clickstream example's worker container (its plain processor, FROM the worker
  image), one pod holding 4 shards: resident memory (the sum of its processes' RSS) when
  idle, and at its peak while kinesalite on the node feeds it records as fast as it takes
  them — beside the RSS of a bare `python` in the same image, the floor.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from clickstream.events import make_events

from bench.results import record
from testbed import podman
from testbed.kinesis import KinesisEmulator, create_stream, put_records
from testbed.node import Cluster, Node
from testbed.userpath import (
    EXAMPLES,
    Kubectl,
    consumer_namespace,
    edited_example,
    helm_binary,
    install_operator,
)
from testbed.waiting import wait_for

MIB = 1024 * 1024
BUSY_SECONDS = 30.0


def image_mb(reference: str) -> float:
    return round(podman.image_size(reference) / 1e6, 1)


def rss_mib(node: Node, container_id: str) -> float:
    total = 0
    for pid in node.container_pids(container_id):
        status = Path(f"/proc/{pid}/status").read_text()
        total += next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
        )
    return total * 1024 / MIB


def ready_container(kubectl: Kubectl, namespace: str) -> str | None:
    """The ID of the one worker pod's container once it is ready."""
    (pod,) = kubectl.pods(namespace)
    statuses = pod["status"].get("containerStatuses", [])
    if not statuses or not statuses[0].get("ready"):
        return None
    return str(statuses[0]["containerID"]).split("://", 1)[1]


def sample(node: Node, container_id: str, seconds: float) -> list[float]:
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(rss_mib(node, container_id))
        time.sleep(0.5)
    return samples


def bare_python_rss(kubectl: Kubectl, node: Node, image: str, namespace: str) -> float:
    """RSS of `python` doing nothing in the worker's image: what any worker costs."""
    kubectl(
        "-n",
        namespace,
        "run",
        "bare",
        f"--image={image}",
        "--restart=Never",
        "--command",
        "--",
        "python",
        "-c",
        "import time; time.sleep(600)",
    )
    kubectl("-n", namespace, "wait", "pod/bare", "--for=condition=Ready", "--timeout=60s")
    pod = json.loads(kubectl("-n", namespace, "get", "pod", "bare", "-o", "json"))
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    rss = max(sample(node, container, 3))
    kubectl("-n", namespace, "delete", "pod", "bare", "--grace-period=0")
    return rss


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="streamconsumer-bench-node-"))
    print("Starting a control plane and a real node (images and binaries cached)...")
    cluster = Cluster.start(workdir)
    emulator: KinesisEmulator | None = None
    try:
        figures = {
            "base_image_mb": image_mb(cluster.images["python"]),
            "worker_image_mb": image_mb(cluster.images["worker"]),
            "worker_spark_image_mb": image_mb(cluster.images["worker-spark"]),
            "operator_image_mb": image_mb(cluster.images["operator"]),
        }
        node = cluster.node
        emulator = KinesisEmulator.start(
            "kinesalite", workdir / "kinesalite", enter=node.spaces.enter, host=node.ip
        )
        figures |= measure_worker(cluster, emulator)
    finally:
        if emulator:
            emulator.stop()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for name, value in figures.items():
        print(f"  {name:28s} {value:8.1f}")
    record(figures)


def measure_worker(cluster: Cluster, emulator: KinesisEmulator) -> dict[str, float]:
    """The clickstream example, one worker over 4 shards: its RSS idle, then busy."""
    node, kubectl = cluster.node, Kubectl(cluster)
    install_operator(cluster, helm_binary(), kubectl, emulator)
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    consumer_namespace(kubectl, namespace)
    stream = "clicks"
    create_stream(emulator.client, stream, 4)
    manifest = edited_example(
        EXAMPLES / "streamconsumer.yaml", cluster.images["clickstream"], stream, emulator, {}
    )
    manifest["spec"]["replicas"] = 1
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
    kubectl(
        "-n",
        namespace,
        "wait",
        "streamconsumer/clickstream",
        "--for=condition=Ready",
        "--timeout=180s",
    )
    wait_for(lambda: bool(ready_container(kubectl, namespace)), 120, "the worker Ready", poll=0.5)
    container = ready_container(kubectl, namespace) or ""
    time.sleep(5)  # its shards granted, its readers polling an empty stream
    idle = sample(node, container, 10)

    stop = threading.Event()
    produced = 0

    def feed() -> None:
        nonlocal produced
        seed = 0
        while not stop.is_set():
            seed += 1
            events = make_events(2000, seed=seed)
            put_records(emulator.client, stream, [(str(i), e) for i, e in enumerate(events)])
            produced += len(events)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    busy = sample(node, container, BUSY_SECONDS)
    stop.set()
    feeder.join(60)
    print(f"  fed {produced} records in {BUSY_SECONDS:.0f}s while sampling")
    floor = bare_python_rss(kubectl, node, cluster.images["worker"], namespace)
    return {
        "worker_rss_mb_idle": round(sorted(idle)[len(idle) // 2], 1),
        "worker_rss_mb_busy": round(max(busy), 1),
        "bare_python_rss_mb": round(floor, 1),
    }


if __name__ == "__main__":
    main()
