"""Enhanced fan-out with the real operator and real worker processes: the operator
registers the stream consumer on create, workers subscribe (and renew their
subscriptions) through a split with nothing lost, in order and without duplicates, and
deleting the StreamConsumer deregisters the consumer behind a finalizer; switching it
back to polling deregisters the consumer at once, and records flow through GetRecords."""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamconsumer.sources.kinesis_consumer import consumer_name
from testbed.kinesis import list_all_shards, split_shard_in_half
from testbed.scenario import FanOutScenario, Scenario
from testbed.waiting import wait_for

RESUBSCRIBE_SECONDS = "6"  # workers renew every 6 s here instead of every 280 s


def consumers(scenario: Scenario) -> list[dict[str, Any]]:
    client = scenario.kinesis.client
    arn = client.describe_stream_summary(StreamName=scenario.stream)
    listed = client.list_stream_consumers(StreamARN=arn["StreamDescriptionSummary"]["StreamARN"])
    return [dict(c) for c in listed["Consumers"]]


def subscriptions(workdir: Path) -> int:
    return sum(
        Path(log).read_text(errors="replace").count(": subscribed at ")
        for log in glob.glob(str(workdir / "pods" / "*" / "output.log"))
    )


@pytest.fixture
def fan_out(scenario: Scenario) -> Iterator[FanOutScenario]:
    """The scenario's stream and namespace, its workers reading through fan-out."""
    running = FanOutScenario(
        scenario.plane,
        scenario.api_client,
        scenario.kinesis,
        scenario.namespace,
        scenario.stream,
        scenario.workdir,
    )
    try:
        yield running
    finally:
        running.stop()


def test_fan_out_from_create_to_delete(fan_out: FanOutScenario) -> None:
    fan_out.start(
        shards=2,
        replicas=2,
        pod_env=lambda _: {"STREAMCONSUMER_RESUBSCRIBE_SECONDS": RESUBSCRIBE_SECONDS},
    )
    name = consumer_name(fan_out.namespace, fan_out.name)
    wait_for(
        lambda: (
            [(c["ConsumerName"], c["ConsumerStatus"]) for c in consumers(fan_out)]
            == [(name, "ACTIVE")]
        ),
        60,
        "the stream consumer registered on create",
    )
    finalizers = fan_out.consumers.get(fan_out.name)["metadata"].get("finalizers", [])
    assert finalizers, "a fanOut StreamConsumer is deleted only after its consumer"

    fan_out.produce(100)
    wait_for(fan_out.all_processed, 60, "records through SubscribeToShard")
    wait_for(lambda: subscriptions(fan_out.workdir) >= 4, 30, "subscriptions renewed")
    first = sorted(s["ShardId"] for s in list_all_shards(fan_out.kinesis.client, fan_out.stream))
    split_shard_in_half(fan_out.kinesis.client, fan_out.stream, first[0])
    fan_out.produce(100)
    wait_for(fan_out.all_processed, 90, "records after the split")
    report = fan_out.delivered()
    children = {
        s["ShardId"]
        for s in list_all_shards(fan_out.kinesis.client, fan_out.stream)
        if s.get("ParentShardId") == first[0]
    }
    assert children & set(report.shard_times), "the children were read too"

    fan_out.consumers.delete(fan_out.name)
    wait_for(
        lambda: not fan_out.consumers.exists(fan_out.name),
        60,
        "the StreamConsumer to go, its finalizer done",
    )
    wait_for(lambda: not consumers(fan_out), 30, "the stream consumer deregistered")


def test_back_to_polling_deregisters_the_stream_consumer(fan_out: FanOutScenario) -> None:
    fan_out.start(shards=1, replicas=1)
    wait_for(lambda: len(consumers(fan_out)) == 1, 60, "the stream consumer registered")
    fan_out.produce(20)
    wait_for(fan_out.all_processed, 60, "records through SubscribeToShard")

    fan_out.consumers.patch(
        fan_out.name, {"spec": {"source": {"kinesis": {"consumer": "polling"}}}}
    )
    wait_for(lambda: not consumers(fan_out), 60, "the stream consumer deregistered")

    fan_out.produce(20)
    wait_for(fan_out.all_processed, 90, "records through GetRecords again")
    fan_out.delivered()  # in order, none lost, none twice

    fan_out.consumers.delete(fan_out.name)  # kopf's finalizer (for the daemon) goes
    wait_for(lambda: not fan_out.consumers.exists(fan_out.name), 60, "the StreamConsumer to go")
