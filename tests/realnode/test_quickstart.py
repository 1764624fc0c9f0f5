"""The quickstart (`make quickstart`) on the real node: the manifests a kind user applies
(examples/quickstart: kinesis-local as a Deployment and Service, the producer, the
clickstream StreamConsumer) and the chart's quickstart values, with our image names
substituted and nothing else but the emulator's address: this node has no cluster DNS, so
the Service's name becomes its ClusterIP (kube-proxy routes it, from the operator and the
pods alike). Records flow end to end: every shard's checkpoint moves, the workers log page
views for at least what the producer had put, and `kubectl get streamconsumers` shows
the consumer Ready with its shards and workers."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.node import Cluster
from testbed.podlogs import PodLogs
from testbed.userpath import REPO, Kubectl
from testbed.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]

QUICKSTART = REPO / "examples" / "quickstart"
NAMESPACE = "quickstart"  # the kustomization's
SERVICE_HOST = f"kinesis-local.{NAMESPACE}.svc"  # what a kind cluster's DNS resolves
RELEASE = "streamconsumer"
# The images the manifests name (`make quickstart` builds them) -> the test bed's recipes.
RECIPES = {
    "streamconsumer/clickstream:dev": "clickstream",
    "streamconsumer/kinesis-local:dev": "kinesis-local",
}
_VIEW = re.compile(r"logger=clickstream (\{.*\})\s*$")
_PUT = re.compile(r"clickstream\.produce put (\d+) events")


def quickstart_manifests(kubectl: Kubectl, images: dict[str, str]) -> list[dict[str, Any]]:
    """`kubectl kustomize examples/quickstart`, each image replaced by the test bed's."""
    docs = [doc for doc in yaml.safe_load_all(kubectl("kustomize", str(QUICKSTART))) if doc]
    for doc in docs:
        if doc["kind"] == "Deployment":
            containers = doc["spec"]["template"]["spec"]["containers"]
        elif doc["kind"] == "StreamConsumer":
            containers = [doc["spec"]["processor"]]
        else:
            continue
        for container in containers:
            assert container["image"] in RECIPES, f"no recipe builds {container['image']}"
            container["image"] = images[RECIPES[container["image"]]]
    return docs


def addressed(text: str, cluster_ip: str) -> str:
    """`text` with the emulator's Service name replaced by its ClusterIP."""
    assert SERVICE_HOST in text, f"{SERVICE_HOST} is no longer what the quickstart names"
    return text.replace(SERVICE_HOST, cluster_ip)


def producer_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "clickstream-producer"
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container.get("env", [])}


def table(output: str) -> list[dict[str, str]]:
    """kubectl's table output as rows by column name (cut at the header's column starts,
    so an empty cell stays empty)."""
    header, *lines = output.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return [
        {
            name: line[start:end].strip()
            for name, start, end in zip(names, starts, ends, strict=True)
        }
        for line in lines
    ]


def test_the_quickstart_manifests_process_records(
    cluster: Cluster,
    kubectl: Kubectl,
    helm: Path,
    operator_namespace: str,
    tmp_path: Path,
) -> None:
    docs = quickstart_manifests(kubectl, cluster.images)
    consumer = next(d for d in docs if d["kind"] == "StreamConsumer")
    name = consumer["metadata"]["name"]
    logs = PodLogs(cluster.node.log_dir(), NAMESPACE).start()
    env = {**os.environ, "KUBECONFIG": str(cluster.plane.kubeconfig)}

    def run_helm(*args: str) -> str:
        done = subprocess.run(
            [str(helm), *args, "--namespace", operator_namespace],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    revision = json.loads(run_helm("status", RELEASE, "--output=json"))["version"]

    def status() -> dict[str, Any]:
        got = kubectl("-n", NAMESPACE, "get", f"streamconsumer/{name}", "-o", "json")
        return dict(json.loads(got).get("status", {}))

    def checkpoints() -> dict[str, int]:
        """The shards' checkpoints (sequence numbers); a crash-looping pod fails at once."""
        kubectl.pods(NAMESPACE)
        kubectl.pods(NAMESPACE, "app in (kinesis-local, clickstream-producer)")
        leases = status().get("leases", {})
        return {
            shard: int(lease["checkpoint"])
            for shard, lease in leases.items()
            if str(lease.get("checkpoint") or "").isdigit()
        }

    def worker_views() -> int:
        return sum(
            json.loads(match.group(1))["views"]
            for lines in logs.streams().values()
            for line in lines
            if (match := _VIEW.search(line))
        )

    def producer_put() -> int:
        counts = [
            int(match.group(1))
            for stream, lines in logs.streams().items()
            if stream.container == "producer"
            for line in lines
            if (match := _PUT.search(line))
        ]
        return max(counts, default=0)

    def details() -> str:
        tails = "\n".join(
            f"--- {s.pod}/{s.container}\n" + "\n".join(lines[-10:])
            for s, lines in logs.streams().items()
        )
        pods = kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide")
        return f"{pods}\nstatus: {json.dumps(status(), indent=1)[:3000]}\n{tails}"

    try:
        # The Service first: its ClusterIP is the emulator's address here.
        for kind in ("Namespace", "Service"):
            for doc in (d for d in docs if d["kind"] == kind):
                kubectl("apply", "-f", "-", input=json.dumps(doc))
        cluster_ip = kubectl(
            "-n", NAMESPACE, "get", "service", "kinesis-local", "-o", "jsonpath={.spec.clusterIP}"
        ).strip()
        values = tmp_path / "values.yaml"
        values.write_text(addressed((QUICKSTART / "values.yaml").read_text(), cluster_ip))
        # As `make quickstart` installs the chart, on top of the README's install here.
        run_helm(
            "upgrade",
            RELEASE,
            "charts/streamconsumer",
            "--reuse-values",
            f"--values={values}",
            "--wait",
            "--timeout=3m",
        )
        listing = {"apiVersion": "v1", "kind": "List", "items": docs}
        kubectl("apply", "-f", "-", input=addressed(json.dumps(listing), cluster_ip))
        for deployment in ("kinesis-local", "clickstream-producer"):
            kubectl(
                "-n", NAMESPACE, "rollout", "status", f"deployment/{deployment}", "--timeout=3m"
            )
        wait = ("wait", f"streamconsumer/{name}", "--for=condition=Ready", "--timeout=3m")
        kubectl("-n", NAMESPACE, *wait)

        shards = int(producer_env(docs)["SHARDS"])
        wait_for(
            lambda: len(checkpoints()) == shards,
            180,
            f"a checkpoint on each of the {shards} shards",
            poll=1,
            details=details,
        )
        first, put_then = checkpoints(), producer_put()
        assert put_then > 0, f"the producer logged no put\n{details()}"
        wait_for(
            lambda: all(checkpoints()[shard] > sequence for shard, sequence in first.items()),
            180,
            f"every checkpoint past {first}",
            poll=1,
            details=details,
        )
        wait_for(
            lambda: worker_views() >= put_then,
            180,
            f"page views logged for the {put_then} events put by the first checkpoints",
            poll=1,
            details=details,
        )
        listed = ""

        def listed_in_full() -> bool:
            """The consumer's row in `kubectl get streamconsumers`, every column filled
            (the lag comes with the workers' reports, a little after Ready)."""
            nonlocal listed
            listed = kubectl("-n", NAMESPACE, "get", "streamconsumers")
            row = {row["NAME"]: row for row in table(listed)}.get(name, {})
            return all(row.get(column) for column in ("SHARDS", "WORKERS", "LAG(MS)", "READY"))

        wait_for(
            listed_in_full,
            120,
            "kubectl get streamconsumers to show the consumer",
            poll=2,
            details=lambda: listed,
        )
    finally:
        logs.stop()
        kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        run_helm("rollback", RELEASE, str(revision), "--wait", "--timeout=3m")

    print(f"{listed}put {producer_put()} events, {worker_views()} page views logged")
    row = {row["NAME"]: row for row in table(listed)}[name]
    assert row["SHARDS"] == str(shards), listed
    assert row["WORKERS"] == str(consumer["spec"]["replicas"]), listed
    assert row["READY"] == "True", listed
    assert row["LAG(MS)"].isdigit(), listed
