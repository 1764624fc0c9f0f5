"""Operator N serves workers N-1 on the real node (docs/upgrades.md, the version policy):
the previous release as its users run it — its chart (tests/releases/chart.tgz) with its
operator image, and the clickstream example built FROM its worker image (both images
built from its committed wheel and pins, testbed.images) — consuming from the emulator on
the node; then, with records put every 0.2 s, `helm upgrade` to this checkout's chart
and operator image: the CRD template and the Deployment change together, and the two
operator replicas roll one at a time (maxSurge 1, maxUnavailable 0).

It checks: every record processed once, each key (so each shard) in order; the worker
pods are the same pods, never restarted, their Deployment's pod template the
same (an operator upgrade must not roll its tenants' workers: rule 2 on
`added_since`); both workers processed records put after the new release's replica took
the operators' Lease and after a whole worker lease (20 s) more, so their leases were
renewed by the new operator alone (the old replicas are gone by then); and what each pod
runs, read from the files of its running process (/proc/PID/root): the previous
release's package in the workers throughout and in the first operator replicas, this
checkout's in the new ones.

Like test_chart_upgrade.py it installs the cluster's CRD (here from the previous
release's chart), so it runs before the README's install of this tier (files run in name
order) and removes all it installed, CRD included, when it ends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from realnode.deliveries import Event, judge
from realnode.flow import EventFlow
from realnode.user import NodeUser
from testbed import releases
from testbed.charts import CHART, UPGRADE_VALUES_FLAG
from testbed.node import Cluster
from testbed.userpath import (
    OPERATOR,
    RELEASE_NAMESPACE,
)
from testbed.waiting import wait_for

from .own_release import RELEASE, OwnRelease

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]
OPERATOR_PODS = "app.kubernetes.io/name=streamconsumer-operator"
LEASE_SECONDS = 20  # the example's leases.durationSeconds


def test_previous_workers_ride_through_an_operator_upgrade_with_records_flowing(
    user_before_install: NodeUser, own_release: OwnRelease, tmp_path: Path
) -> None:
    user, release = user_before_install, own_release
    cluster, kubectl, emulator, consumer_ns = user

    def image_values(name: str) -> list[str]:
        repository, tag = cluster.images[name].rsplit(":", 1)
        return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]

    def get(*args: str) -> Any:
        return json.loads(kubectl("get", *args, "-o", "json"))

    def runs(pod: dict[str, Any]) -> str:
        """The release whose package the pod's running container holds."""
        return _release_in(cluster, pod)

    host = str(urlsplit(emulator.endpoint_url).hostname)
    stream = user.new_stream(4, prefix="prevup")
    flow = EventFlow(cluster, kubectl, emulator, stream, consumer_ns)

    def leader_pod() -> str:
        lease = get("-n", RELEASE_NAMESPACE, "lease", OPERATOR)
        return str(lease.get("spec", {}).get("holderIdentity") or "").split("/", 1)[0]

    try:
        release.install(
            releases.verified(releases.PREVIOUS_CHART), host, *image_values("operator-previous")
        )
        manifest = flow.example(cluster.images["clickstream-previous"])
        assert manifest["spec"]["leases"]["durationSeconds"] == LEASE_SECONDS
        flow.apply_ready(manifest)
        flow.produce(400)
        flow.wait_all_processed("the first events processed")
        wait_for(
            lambda: len(kubectl.pods(consumer_ns)) == 2 and _owners(get, consumer_ns) == 2,
            120,
            "both workers holding shards",
            poll=0.5,
            details=flow.worker_logs,
        )

        # Before: the previous release everywhere.
        old_operators = _running(kubectl.pods(RELEASE_NAMESPACE, OPERATOR_PODS))
        assert len(old_operators) == 2, [p["metadata"]["name"] for p in old_operators]
        assert [runs(p) for p in old_operators] == ["previous"] * 2
        workers = _running(kubectl.pods(consumer_ns))
        assert [runs(p) for p in workers] == ["previous"] * 2
        before = {p["metadata"]["uid"]: _restarts(p) for p in workers}
        (deployment,) = get("-n", consumer_ns, "deployments")["items"]
        worker_deployment = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        old_names = {p["metadata"]["name"] for p in old_operators}
        assert leader_pod() in old_names

        # The upgrade, with records flowing: this chart (its CRD template and Deployment)
        # and this checkout's operator image, the release's other values kept.
        started = time.monotonic()
        with _flowing(flow.produce, every=0.2, count=4) as flowed:
            time.sleep(3)
            release.helm(
                "upgrade", RELEASE, CHART, "-n", RELEASE_NAMESPACE, UPGRADE_VALUES_FLAG,
                *image_values("operator"), "--wait", "--timeout", "5m",
            )  # fmt: skip
            upgraded = time.monotonic() - started

            def only_new_operators_lead() -> bool:
                pods = kubectl.pods(RELEASE_NAMESPACE, OPERATOR_PODS)
                names = {p["metadata"]["name"] for p in pods}
                return not names & old_names and leader_pod() in names

            wait_for(only_new_operators_lead, 180, "the old operator pods gone, a new leader")
            led = time.monotonic() - started
            after_takeover = len(flow.produced())
            # A whole worker lease more: every lease the workers hold now was renewed by
            # the new operator, the only one left.
            time.sleep(LEASE_SECONDS + 5)
        flow.produce(200)
        flow.wait_all_processed("the events after the upgrade")

        new_operators = _running(kubectl.pods(RELEASE_NAMESPACE, OPERATOR_PODS))
        assert len(new_operators) == 2
        assert [runs(p) for p in new_operators] == ["current"] * 2
        workers_after = _running(kubectl.pods(consumer_ns))
        assert {p["metadata"]["uid"]: _restarts(p) for p in workers_after} == before, (
            "the operator upgrade replaced or restarted worker pods"
        )
        assert [runs(p) for p in workers_after] == ["previous"] * 2
        deployment = get("-n", consumer_ns, "deployment", worker_deployment)
        assert deployment["spec"]["template"] == template, (
            "the new operator changed the workers' pod template"
        )
    finally:
        flow.logs.stop()
        release.remove(consumer_ns)

    verdict = judge(flow.producer.produced, flow.logs.streams())
    late: set[Event] = set(flow.producer.produced[after_takeover:])
    late_by_pod = {
        s.pod: sum(1 for event in events if event in late)
        for s, events in verdict.by_stream.items()
    }
    print(
        f"previous release ({releases.previous_commit()[:7]}) -> this checkout under 2 workers "
        f"of the previous release: {len(flow.producer.produced)} events ({flowed[0]} put during "
        f"the upgrade), {len(verdict.lost)} lost, {sum(verdict.duplicates.values())} "
        f"duplicates; helm upgrade --wait {upgraded:.0f} s, new leader alone at {led:.0f} s; "
        f"events put after that, processed per worker pod: {late_by_pod}"
    )
    assert not verdict.lost, verdict.lost[:20]
    assert not verdict.out_of_order, verdict.out_of_order[:20]
    assert not verdict.duplicates, sorted(verdict.duplicates)[:20]
    worker_names = sorted(p["metadata"]["name"] for p in workers)
    assert sorted(late_by_pod) == worker_names, late_by_pod
    assert all(late_by_pod[name] > 0 for name in worker_names), (
        f"a previous worker processed nothing after the new operator took over: {late_by_pod}"
    )


@contextmanager
def _flowing(produce: Callable[[int], None], every: float, count: int) -> Iterator[list[int]]:
    """`count` events put every `every` seconds until the block ends; yields [how many]."""
    stop = threading.Event()
    put = [0]
    failures: list[BaseException] = []

    def loop() -> None:
        while not stop.wait(every):
            try:
                produce(count)
            except Exception as error:  # surfaced when the block ends
                failures.append(error)
                return
            put[0] += count

    thread = threading.Thread(target=loop, name="producer", daemon=True)
    thread.start()
    try:
        yield put
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not failures, failures


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods not being deleted, by name."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=lambda p: str(p["metadata"]["name"]))


def _restarts(pod: dict[str, Any]) -> int:
    return sum(s["restartCount"] for s in pod.get("status", {}).get("containerStatuses", []))


def _owners(get: Callable[..., Any], namespace: str) -> int:
    status = get("-n", namespace, "streamconsumer/clickstream").get("status", {})
    return len({lease.get("owner") for lease in status.get("leases", {}).values()} - {None})


def _release_in(cluster: Cluster, pod: dict[str, Any]) -> str:
    """The release whose streamconsumer package the pod's (one) container holds, read from
    its running process's root filesystem."""
    (status,) = pod["status"]["containerStatuses"]
    container = status["containerID"].split("://", 1)[1]
    for pid in sorted(cluster.node.container_pids(container)):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"streamconsumer.worker" in cmdline or b"streamconsumer.controller" in cmdline:
            return releases.installed_release(Path(f"/proc/{pid}/root"))
    raise AssertionError(f"no streamconsumer process in pod {pod['metadata']['name']}")
