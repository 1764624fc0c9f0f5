"""Faults combined, on the real parts (issue 11): reshards over several generations, an
operator outage longer than the lease followed by a scale change, a sink that is down
during a scale-down, and a worker whose token is refused. Nothing lost, per-shard
order, lineage order, and no duplicate where every move was planned."""

from __future__ import annotations

import time
from pathlib import Path

from streamconsumer.core.lineage import expand
from testbed.kinesis import list_all_shards, merge_shards, split_shard_in_half
from testbed.recording import Report
from testbed.scenario import TESTS_DIR, Scenario
from testbed.specs import worker_config
from testbed.waiting import wait_for
from testbed.worker_run import run_worker


def lineage_respected(scenario: Scenario, report: Report) -> None:
    """Every child's first record was processed after its parents' last."""
    for shard in list_all_shards(scenario.kinesis.client, scenario.stream):
        if shard["ShardId"] not in report.shard_times:
            continue  # no record hashed to it
        first = report.shard_times[shard["ShardId"]][0]
        for parent in filter(
            None, (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
        ):
            if parent in report.shard_times:
                assert report.shard_times[parent][1] <= first, f"{shard['ShardId']} before {parent}"


def settled_lineage(scenario: Scenario, finished: set[str]) -> bool:
    """The status lists only open shards' leases, and remembers the finished ones."""
    status = scenario.status()
    open_shards = {
        s["ShardId"]
        for s in list_all_shards(scenario.kinesis.client, scenario.stream)
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
    }
    remembered = expand(status.get("finishedShards") or [])
    return set(status.get("leases", {})) == open_shards and finished <= remembered


def children_of(scenario: Scenario, parent: str) -> list[str]:
    shards = list_all_shards(scenario.kinesis.client, scenario.stream)
    return sorted(
        s["ShardId"]
        for s in shards
        if parent in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))
    )


def one_shard_processed(scenario: Scenario, records: int) -> str:
    """Starts one shard read by two workers and processes `records`; the shard's id."""
    scenario.start(shards=1, replicas=2)
    scenario.produce(records)
    wait_for(scenario.all_processed, 60, "records before the first split")
    (original,) = list_all_shards(scenario.kinesis.client, scenario.stream)
    return str(original["ShardId"])


def split_then_processed(
    scenario: Scenario, shard: str, records: int, timeout: float = 60
) -> list[str]:
    """Splits `shard`, then produces `records` and waits for them; its two children."""
    split_shard_in_half(scenario.kinesis.client, scenario.stream, shard)
    scenario.produce(records)
    wait_for(scenario.all_processed, timeout, f"records after splitting {shard}")
    return children_of(scenario, shard)


def test_a_split_merged_back_never_brings_the_original_shard_back(scenario: Scenario) -> None:
    """11.1: once the children's leases left the status, the original shard was granted
    again at epoch 1 and read from TRIM_HORIZON after its descendants."""
    original = one_shard_processed(scenario, 50)
    low, high = split_then_processed(scenario, original, 50)
    # Scale-in: the two halves merged back.
    merge_shards(scenario.kinesis.client, scenario.stream, low, high)
    scenario.produce(50)
    wait_for(scenario.all_processed, 90, "records after the merge")
    wait_for(lambda: settled_lineage(scenario, {original, low, high}), 60, "the lineage to settle")
    time.sleep(3)  # several loop turns and status writes later...
    assert settled_lineage(scenario, {original, low, high}), "...still settled"
    report = scenario.delivered(duplicates_at_most=0)
    lineage_respected(scenario, report)


def test_two_generations_of_splits(scenario: Scenario) -> None:
    original = one_shard_processed(scenario, 40)
    low, _high = split_then_processed(scenario, original, 40)
    grandchildren = split_then_processed(scenario, low, 40)
    split_then_processed(scenario, grandchildren[0], 40, timeout=90)
    finished = {original, low, grandchildren[0]}
    wait_for(lambda: settled_lineage(scenario, finished), 60, "the lineage to settle")
    report = scenario.delivered(duplicates_at_most=0)
    lineage_respected(scenario, report)


def test_an_outage_longer_than_the_lease_then_a_scale_down(scenario: Scenario) -> None:
    """11.2 with 11.7: the fence closes while batches fail and wait; the operator comes
    back to a scale-down. The hand-off stores only what was processed, with its position:
    nothing lost, nothing replayed."""
    lease = 6.0
    scenario.start(
        shards=4, replicas=2, lease_seconds=lease, processor_env={"RECORD_FAIL_EVERY": "3"}
    )
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")
    with scenario.producing():
        time.sleep(2)
        assert scenario.operator is not None
        scenario.operator.kill()
        time.sleep(lease + 3)  # every worker has fenced itself by now
        scenario.scale(1)  # a pod gets SIGTERM while the operator is away
        time.sleep(2)
        scenario.start_operator()
        wait_for(lambda: list(scenario.owners().values()) == [4], 60, "one worker owning all")
    wait_for(scenario.all_processed, 60, "every record produced")
    scenario.delivered(duplicates_at_most=0)


def test_a_sink_down_during_a_scale_down_does_not_hold_the_hand_off(
    scenario: Scenario, tmp_path: Path
) -> None:
    """11.10: retries of a failing batch could not be interrupted: the drained pod was
    killed at its grace period (30 s) and its records replayed."""
    down = tmp_path / "sink-down"
    scenario.start(shards=4, replicas=2, processor_env={"RECORD_DOWN_WHILE": str(down)})
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "records before the sink goes down")
    down.touch()  # every batch fails from now on and is retried
    scenario.produce(100)
    time.sleep(3)
    assert scenario.kubelet is not None
    kubelet = scenario.kubelet
    scenario.scale(1)
    took = wait_for(lambda: len(kubelet.running()) == 1, 25, "the drained pod to exit")
    assert took < 15, "the hand-off waited for the retries"
    down.unlink()
    wait_for(scenario.all_processed, 60, "every record once the sink is back")
    scenario.delivered(duplicates_at_most=0)


def test_a_worker_whose_token_is_refused_gives_up(scenario: Scenario, tmp_path: Path) -> None:
    """11.14: a worker refused by the operator (its pod was deleted) heartbeated for
    ever; it now exits with a non-zero status and says why."""
    scenario.start(shards=1, replicas=0)
    assert scenario.operator is not None
    token = tmp_path / "token"
    token.write_text("not-a-token-of-this-cluster")
    config = worker_config(
        operator_url=scenario.operator.url,
        namespace=scenario.namespace,
        consumer=scenario.name,
        worker_name="intruder",
        token_path=str(token),
        entrypoint="testbed.recording:RecordingProcessor",
        stream_name=scenario.stream,
        endpoint_url=scenario.kinesis.endpoint_url,
        region="us-east-1",
        give_up_seconds=3,
    )
    worker = run_worker(config, pythonpath=TESTS_DIR)
    assert worker.returncode == 2, worker.stderr
    assert "the operator refused this worker for 3s" in worker.stderr
    assert "Traceback" not in worker.stderr
