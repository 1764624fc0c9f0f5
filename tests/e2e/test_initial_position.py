"""`initialPosition: LATEST` on the real parts (issue 13.5): the history before the
consumer's creation is skipped, and nothing after it is, even when a shard moves before
its first checkpoint."""

from __future__ import annotations

import time

from testbed.kinesis import create_stream, put_records
from testbed.scenario import Scenario
from testbed.waiting import wait_for

LEASE = 4.0


def test_latest_skips_nothing_when_a_shard_moves_before_its_first_checkpoint(
    scenario: Scenario,
) -> None:
    create_stream(scenario.kinesis.client, scenario.stream, 2)
    history = [f"h-{i}" for i in range(40)]
    put_records(scenario.kinesis.client, scenario.stream, [(v, v.encode()) for v in history])
    time.sleep(1.1)  # creationTimestamp has whole seconds: the history is a second older
    scenario.start(shards=None, replicas=2, lease_seconds=LEASE, initial_position="LATEST")
    wait_for(lambda: sorted(scenario.owners().values()) == [1, 1], 60, "a shard per worker")

    # One worker dies before its shard saw a record, so before any checkpoint; records
    # arrive while nobody reads that shard. Its next owner must start where the consumer
    # started, not at the tip as it is when the shard moves.
    victim = sorted(scenario.owners())[0]
    scenario.crash_worker(victim)
    scenario.produce(100)
    wait_for(scenario.all_processed, 90, "the records put after the consumer's creation")

    report = scenario.delivered(duplicates_at_most=0)
    seen = {e["data"] for e in report.events}
    assert not seen & set(history), "records from before the consumer's creation"
    assert victim not in report.by_worker, "the victim died before any record arrived"
