"""A poison record under each failure policy, on the real parts (issue 13.2): `block`
holds its shard and says so in Degraded; `skip` and `deadLetter` pass over that record
alone (the failing batch is bisected), with an Event, and the dead-letter stream holds it
with its error. Nothing else is lost, nothing is repeated."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from testbed.kinesis import create_stream, list_all_shards, put_records
from testbed.scenario import Scenario
from testbed.waiting import wait_for

POISON = "r-7"


def degraded(scenario: Scenario) -> str:
    conditions = scenario.status().get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Degraded"), "")


def dead_letters(scenario: Scenario, stream: str) -> list[dict[str, Any]]:
    client = scenario.kinesis.client
    found = []
    for shard in list_all_shards(client, stream):
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        found += [
            json.loads(r["Data"]) for r in client.get_records(ShardIterator=iterator)["Records"]
        ]
    return found


@pytest.mark.parametrize("then", ["block", "skip", "deadLetter"])
def test_a_poison_record_under_each_policy(scenario: Scenario, then: str) -> None:
    client = scenario.kinesis.client
    policy: dict[str, Any] = {
        "retries": 2,
        "initialBackoffSeconds": 0.05,
        "maxBackoffSeconds": 0.5,
        "then": then,
    }
    dlq = f"{scenario.stream}-dlq"
    if then == "deadLetter":
        create_stream(client, dlq, 1)
        policy["deadLetter"] = {
            "kinesis": {
                "streamName": dlq,
                "region": "us-east-1",
                "endpointURL": scenario.kinesis.endpoint_url,
            }
        }
    scenario.start(shards=2, replicas=1, processor_env={"RECORD_POISON": POISON}, on_failure=policy)
    scenario.produce(40)

    if then == "block":
        wait_for(lambda: "blocked" in degraded(scenario), 60, "Degraded to name the shard")
        assert "cannot process r-7" in degraded(scenario)
        report = scenario.report()
        assert POISON in report.lost, "a blocked record is never passed over"
        assert report.order_violations == []
        return

    wait_for(lambda: scenario.report().lost == {POISON}, 90, "all records but the poison")
    report = scenario.report()
    assert report.duplicates == 0
    assert report.order_violations == []
    reason = "RecordsSkipped" if then == "skip" else "RecordsDeadLettered"
    wait_for(lambda: any(r == reason for r, _ in scenario.events()), 30, f"a {reason} Event")
    (message,) = [m for r, m in scenario.events() if r == reason]
    assert "1 records" in message
    assert "cannot process r-7" in message
    if then == "deadLetter":
        (letter,) = dead_letters(scenario, dlq)
        assert base64.b64decode(letter["data"]).decode() == POISON
        assert "cannot process r-7" in letter["error"]
        assert letter["attempts"] >= 1
    assert "blocked" not in degraded(scenario)


def test_a_poison_record_too_large_to_dead_letter_blocks_its_shard(scenario: Scenario) -> None:
    """Issue 22.7: 800 KiB of data is over Kinesis' 1 MiB as a dead letter. The shard
    blocks and Degraded names it, the record and why, instead of retrying the write for
    ever under a 'failing' that no condition shows."""
    client = scenario.kinesis.client
    dlq = f"{scenario.stream}-dlq"
    create_stream(client, dlq, 1)
    policy = {
        "retries": 1,
        "initialBackoffSeconds": 0.05,
        "maxBackoffSeconds": 0.5,
        "then": "deadLetter",
        "deadLetter": {
            "kinesis": {
                "streamName": dlq,
                "region": "us-east-1",
                "endpointURL": scenario.kinesis.endpoint_url,
            }
        },
    }
    env = {"RECORD_POISON_OVER_BYTES": str(100 * 1024)}
    scenario.start(shards=1, replicas=1, processor_env=env, on_failure=policy)
    scenario.produce(5)
    ((shard, sequence),) = put_records(client, scenario.stream, [("large", b"L" * 800 * 1024)])
    wait_for(lambda: "blocked" in degraded(scenario), 90, "Degraded to name the shard")
    message = degraded(scenario)
    assert f"{shard} blocked" in message
    assert f"record {sequence} is" in message
    assert "over the Kinesis record limit of 1048576 bytes" in message
    # Report texts are cut at MAX_REPORT_CHARS (a bound on worker input): the reason and
    # the record come first; the processor's own error is named, its text may be cut.
    assert "the processor raised ValueError" in message
    assert dead_letters(scenario, dlq) == [], "nothing written that cannot fit"
    assert scenario.report().lost == set(), "the records before it were processed"
