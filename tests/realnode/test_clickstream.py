"""The user's path on a real node: the chart installed with our operator image (the
README's install block), the clickstream example's StreamConsumer with our processor
image consuming from a Kinesis emulator on the node, through a `kubectl delete pod` of a
worker and a `kubectl rollout restart` of the operator. Nothing lost, each shard's
events in order within each worker run, duplicates only of what the deleted pod had."""

from __future__ import annotations

import json

import pytest

from realnode.deliveries import judge
from realnode.flow import EventFlow
from realnode.user import NodeUser
from testbed.userpath import OPERATOR
from testbed.waiting import wait_for

# The first test of a session also waits for cold image and binary builds.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]


def test_clickstream_through_a_pod_delete_and_an_operator_restart(
    user: NodeUser, operator_namespace: str
) -> None:
    cluster, kubectl, _, consumer_ns = user
    flow = EventFlow(cluster, kubectl, user.emulator, user.new_stream(4), consumer_ns)

    try:
        manifest = flow.example(cluster.images["clickstream"])
        flow.apply_ready(manifest)
        flow.produce(400)
        flow.wait_all_processed("the first events processed")

        victim = kubectl.pods(consumer_ns)[0]["metadata"]["name"]
        flow.produce(200)
        kubectl("-n", consumer_ns, "delete", "pod", victim, "--timeout=120s")
        flow.produce(200)
        flow.wait_all_processed(f"the events after deleting pod {victim}")
        # The survivor may well have processed all that alone while the replacement pod
        # was starting (a loaded machine): wait until the replacement holds its share, so
        # the events below show it working.

        def replacement_holds_shards() -> bool:
            """Two owners, neither the deleted pod: the survivor and its replacement."""
            status = json.loads(
                kubectl("-n", consumer_ns, "get", "streamconsumer/clickstream", "-o", "json")
            ).get("status", {})
            owners = {lease.get("owner") for lease in status.get("leases", {}).values()}
            return len(owners - {None, victim}) == 2

        wait_for(
            replacement_holds_shards,
            180,
            "the replacement pod's share",
            poll=0.5,
            details=flow.worker_logs,
        )

        kubectl("-n", operator_namespace, "rollout", "restart", f"deployment/{OPERATOR}")
        flow.produce(200)
        kubectl(
            "-n",
            operator_namespace,
            "rollout",
            "status",
            f"deployment/{OPERATOR}",
            "--timeout=180s",
        )
        flow.produce(200)
        flow.wait_all_processed("the events after the operator's restart")
    finally:
        flow.logs.stop()

    verdict = judge(flow.producer.produced, flow.logs.streams())
    workers = sorted(stream.pod for stream, events in verdict.by_stream.items() if events)
    print(
        f"{len(flow.producer.produced)} events, {sum(verdict.duplicates.values())} duplicates,"
        f" processed by {workers}; deleted {victim}"
    )
    assert not verdict.lost
    assert not verdict.out_of_order, verdict.out_of_order[:20]
    had = {event for s, events in verdict.by_stream.items() if s.pod == victim for event in events}
    unexplained = sorted(event for event in verdict.duplicates if event not in had)
    assert not unexplained, f"duplicates of events pod {victim} never had: {unexplained[:20]}"
    assert victim in workers, f"the deleted pod processed nothing; workers: {workers}"
    assert len(workers) >= 3, f"no replacement pod processed anything: {workers}"
