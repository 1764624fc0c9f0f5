"""Series follow their subject: a shard's go when it leaves, a consumer's when its loop
stops (gauges) or it is deleted (counters); counters start at 0 so an increase is seen."""

from __future__ import annotations

from prometheus_client import REGISTRY as WORKER_REGISTRY

from streamconsumer.controller import metrics
from streamconsumer.processor import Record
from streamconsumer.worker import metrics as worker_metrics


def operator_series(namespace: str, consumer: str) -> set[str]:
    return {
        sample.name + ("/" + sample.labels["shard"] if "shard" in sample.labels else "")
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
        and sample.labels.get("consumer") == consumer
        and not sample.name.endswith("_created")
    }


def test_a_consumers_shards_leave_with_them_and_its_series_with_it() -> None:
    gauges = metrics.ConsumerGauges("ns-a", "gone")
    assert "streamconsumer_status_write_failures_total" in operator_series("ns-a", "gone")
    gauges.update(
        {"s-1": 1500, "s-2": 0}, workers=1, open_shards=2, blocked_shards=0, stuck_shards=0
    )
    series = operator_series("ns-a", "gone")
    assert {
        "streamconsumer_seconds_behind_latest/s-1",
        "streamconsumer_seconds_behind_latest/s-2",
    } <= series
    assert (
        metrics.REGISTRY.get_sample_value(
            "streamconsumer_max_seconds_behind_latest", {"namespace": "ns-a", "consumer": "gone"}
        )
        == 1.5
    )

    gauges.update({"s-2": 0}, workers=1, open_shards=1, blocked_shards=0, stuck_shards=0)
    assert "streamconsumer_seconds_behind_latest/s-1" not in operator_series("ns-a", "gone")

    metrics.CHECKPOINTS.labels("ns-a", "gone", "ok").inc()
    gauges.clear()  # the loop stopped here: gauges go, counters stay
    left = operator_series("ns-a", "gone")
    assert not any("seconds_behind" in name or name == "streamconsumer_workers" for name in left)
    assert "streamconsumer_checkpoints_total" in left

    metrics.forget("ns-a", "gone")  # deleted
    assert operator_series("ns-a", "gone") == set()


def test_forgetting_one_consumer_leaves_the_others() -> None:
    metrics.ConsumerGauges("ns-b", "kept")
    metrics.ConsumerGauges("ns-b", "deleted")
    metrics.forget("ns-b", "deleted")
    assert "streamconsumer_checkpoints_total" in operator_series("ns-b", "kept")


def worker_series(shard: str) -> set[str]:
    return {
        sample.name
        for family in WORKER_REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("shard") == shard and not sample.name.endswith("_created")
    }


def test_a_shards_worker_series_start_at_zero_and_go_when_it_leaves() -> None:
    worker_metrics.shard_started("shardId-9")
    started = worker_series("shardId-9")
    assert "streamconsumer_worker_dead_lettered_records_total" in started
    assert (
        WORKER_REGISTRY.get_sample_value(
            "streamconsumer_worker_records_total", {"shard": "shardId-9"}
        )
        == 0
    )
    worker_metrics.batch_processed("shardId-9", [Record(b"x", "k", "1")], 0.0)
    worker_metrics.behind("shardId-9", 2500)
    assert (
        WORKER_REGISTRY.get_sample_value(
            "streamconsumer_worker_seconds_behind_latest", {"shard": "shardId-9"}
        )
        == 2.5
    )
    worker_metrics.shard_left("shardId-9")
    assert worker_series("shardId-9") == set()
