"""A StreamConsumer reading a DynamoDB table's changes, end to end: the real operator
lists the table stream's shards, real worker processes (the local kubelet's pods) read
them, a worker killed midway hands nothing over and its shard moves on after its lease,
and a closed shard is read to its end and finished."""

from __future__ import annotations

from testbed.table_scenario import TableScenario
from testbed.waiting import wait_for

LEASE = 6.0


def test_a_tables_changes_are_processed_across_a_worker_kill_and_a_shard_end(
    table_scenario: TableScenario,
) -> None:
    scenario = table_scenario
    scenario.start(shards=1, replicas=2, lease_seconds=LEASE, max_records=20)
    scenario.produce(120)
    wait_for(scenario.all_processed, 90, "the first changes")
    (shard,) = scenario.status()["leases"]
    last = max(int(e["seq"]) for e in scenario.report().events)
    wait_for(
        lambda: int(scenario.status()["leases"][shard].get("checkpoint") or 0) == last,
        30,
        "the checkpoint at the last change processed",
    )
    owner = scenario.status()["leases"][shard]["owner"]
    assert owner

    killed_at = scenario.crash_worker(owner)
    scenario.produce(120)
    wait_for(scenario.all_processed, 90, "changes after the kill")
    report = scenario.delivered(duplicates_at_most=None)
    resumed = report.first_processed(shard, after=killed_at, besides=owner)
    assert resumed is not None
    assert report.shard_owners[shard][-1] != owner
    # Only the batch in flight when the worker died may come twice.
    assert report.duplicates <= 20
    events = {token.split(":")[0] for token in scenario.produced}
    assert events == {"INSERT", "MODIFY", "REMOVE"}

    # Disabling the stream closes its shard: read to its end, checkpointed SHARD_END.
    scenario.dynamodb.client.update_table(
        TableName=scenario.table, StreamSpecification={"StreamEnabled": False}
    )
    wait_for(
        lambda: (
            shard in str(scenario.status().get("finishedShards", []))
            or scenario.status().get("leases", {}).get(shard, {}).get("checkpoint") == "SHARD_END"
        ),
        60,
        "the closed shard to finish",
    )
    scenario.delivered(duplicates_at_most=20)


def test_a_re_enabled_stream_is_read_after_the_old_streams_tail(
    table_scenario: TableScenario,
) -> None:
    """The table's stream disabled and enabled again (a new StreamViewType needs it)
    while the workers are still behind on it: the running operator notices the new
    stream, the old one's tail is read to its end first, then the new stream; nothing
    lost or twice, and an Event says so."""
    scenario = table_scenario
    scenario.start(shards=1, replicas=2, lease_seconds=LEASE, max_records=5, delay=0.1)
    scenario.produce(100)  # 20 batches of 100 ms: seconds of tail behind the workers
    wait_for(lambda: bool(scenario.status().get("leases")), 60, "the first shard leased")
    (old,) = scenario.status()["leases"]
    client = scenario.dynamodb.client
    client.update_table(TableName=scenario.table, StreamSpecification={"StreamEnabled": False})
    client.update_table(
        TableName=scenario.table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    assert not scenario.all_processed(), "the old stream's tail waits"
    scenario.produce(40)
    wait_for(scenario.all_processed, 120, "both streams' changes")
    report = scenario.delivered(duplicates_at_most=0)
    (new,) = set(report.shard_times) - {old}
    assert report.shard_times[old][1] <= report.shard_times[new][0], "old tail first"
    replaced = [message for reason, message in scenario.events() if reason == "StreamReplaced"]
    assert replaced == [f"a new stream's {new} starts once {old} is read to its end"]
