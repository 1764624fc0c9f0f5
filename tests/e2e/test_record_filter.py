"""processor.filter on the real parts (issue 29): the operator renders the filter into
the worker pods, the workers pass only matching records to the processor, and every
shard's checkpoint still reaches its last record, filtered or not."""

from __future__ import annotations

from testbed.kinesis import list_all_shards
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def last_sequences(scenario: Scenario) -> dict[str, str]:
    """Each shard's last record's sequence number."""
    client = scenario.kinesis.client
    last = {}
    for shard in list_all_shards(client, scenario.stream):
        iterator = client.get_shard_iterator(
            StreamName=scenario.stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = client.get_records(ShardIterator=iterator, Limit=10000)["Records"]
        if records:
            last[shard["ShardId"]] = records[-1]["SequenceNumber"]
    return last


def test_only_matching_records_reach_the_processor_and_checkpoints_pass_the_rest(
    scenario: Scenario,
) -> None:
    # The test bed's partition key is the record's value, r-<n>.
    record_filter = {"patterns": [{"partitionKey": {"prefix": "r-1"}}]}
    scenario.start(shards=2, replicas=1, filter=record_filter)
    scenario.produce(60)
    wanted = {value for value in scenario.produced if value.startswith("r-1")}
    ends = last_sequences(scenario)
    wait_for(lambda: scenario.checkpoints() == ends, 90, "checkpoints at every shard's end")
    report = scenario.report()
    processed = {e["data"] for e in report.events}
    assert processed == wanted
    assert report.duplicates == 0
