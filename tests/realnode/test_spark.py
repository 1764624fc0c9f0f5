"""The Spark example's StreamConsumer (Spark in the worker, the Spark worker image) on a
real node: its container runs with the read-only root filesystem the operator gives
every worker, and its page views must equal what was produced.

The pipeline writes to the only place a read-only container can: the pod's own scratch
directory (/tmp). The test reads that directory on the node's disk."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clickstream.events import expected_page_views, make_events
from clickstream.pipeline import read_page_views

from realnode.user import NodeUser
from testbed.kinesis import put_records
from testbed.node import Cluster
from testbed.podlogs import PodLogs
from testbed.userpath import EXAMPLES, edited_example
from testbed.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

OUTPUT = "/tmp/page-views"


def counted(cluster: Cluster, pods: list[dict[str, Any]]) -> Counter[tuple[str, str]] | None:
    """The page views in the pods' scratch directories, as the node's disk has them;
    None while a batch is being written."""
    kubelet_pods = cluster.node.spaces.private("/var/lib") / "kubelet" / "pods"
    views: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        volumes = kubelet_pods / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir"
        for output in volumes.glob(f"*/{Path(OUTPUT).name}"):
            try:
                views.update(read_page_views(str(output)))
            except (FileNotFoundError, pa.ArrowInvalid):
                return None
    return views


def test_spark_example_counts_each_event_in_a_read_only_container(
    user: NodeUser,
) -> None:
    cluster, kubectl, emulator, consumer_ns = user
    stream = user.new_stream(2, prefix="clicks-spark")
    manifest = edited_example(
        EXAMPLES / "spark" / "streamconsumer-spark.yaml",
        cluster.images["clickstream-spark"],
        stream,
        emulator,
        {"CLICKSTREAM_OUTPUT": OUTPUT, "CLICKSTREAM_BATCH_SECONDS": "2"},
    )
    manifest["spec"]["replicas"] = 1  # its pods ask for a whole CPU: this node has two
    logs = PodLogs(cluster.node.log_dir(), consumer_ns).start()

    def details() -> str:
        status = kubectl("-n", consumer_ns, "get", "pods", "-o", "wide")
        tails = "\n".join(
            f"--- {s.pod} run {s.restart}\n" + "\n".join(lines[-25:])
            for s, lines in logs.streams().items()
        )
        return f"{status}\n{tails}"

    try:
        kubectl("-n", consumer_ns, "apply", "-f", "-", input=json.dumps(manifest))
        events = make_events(300, seed=12)
        put_records(emulator.client, stream, [(str(i), e) for i, e in enumerate(events)])
        expected = expected_page_views(events)
        wait_for(
            lambda: counted(cluster, kubectl.pods(consumer_ns)) == expected,
            420,
            "the Spark worker's page views to equal what was produced",
            poll=0.5,
            details=details,
        )
    finally:
        logs.stop()
    (pod,) = kubectl.pods(consumer_ns)
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
