"""processor.processes (issue 29): a CPU-bound processor in one pod, its shards worked by
one worker process against two, on the real parts (a local control plane, the operator,
worker pods of real processes, kinesalite). Same records, same processor: the figure is
records/s with two processes against one, from the first processor call to the last
record done (the shards' moves to the second process included, as a user gets them).
On this 2-core machine the operator, the apiserver and the emulator share the cores."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from kubernetes import client as k8s

from bench.results import record
from bench.scratch import scratch_plane, with_the_crd
from bench.system import fill, namespace
from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator
from testbed.scenario import Scenario
from testbed.waiting import wait_for

SHARDS = 4
RECORDS = 12_000
HASH_ROUNDS = 6_000  # sha256 rounds over each 100-byte record: about 1.4 ms of CPU here


def records_per_second(records_dir: Path) -> float | None:
    """Records/s over every `<shard>.<worker>.count` file, once all records are done."""
    done, first, last = 0, float("inf"), 0.0
    for path in records_dir.glob("*.count"):
        count, started, at = path.read_text().split()
        done, first, last = done + int(count), min(first, float(started)), max(last, float(at))
    return RECORDS / (last - first) if done >= RECORDS else None


def measure(
    plane: ControlPlane, api: k8s.ApiClient, emulator: KinesisEmulator, work: Path, processes: int
) -> float:
    stream = f"cpu-{processes}"
    fill(emulator, stream, SHARDS, RECORDS)
    ns = namespace(api, f"bench-processes-{processes}")
    scenario = Scenario(plane, api, emulator, ns, stream, work / stream)
    try:
        scenario.start(
            shards=None,
            replicas=1,
            processor="testbed.recording:HashingProcessor",
            processor_env={"HASH_ROUNDS": str(HASH_ROUNDS)},
            max_records=500,
            processes=processes,
        )
        wait_for(
            lambda: records_per_second(scenario.records_dir) is not None,
            600,
            f"{RECORDS} records with {processes} processes",
            poll=0.5,
        )
        rate = records_per_second(scenario.records_dir)
        assert rate is not None
        return rate
    finally:
        scenario.stop()


def main() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # the emulator takes any
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with contextlib.ExitStack() as cleanup:
        work, plane = cleanup.enter_context(scratch_plane("streamconsumer-bench-processes-"))
        emulator = cleanup.enter_context(KinesisEmulator.start("kinesalite", work / "kinesalite"))
        api = with_the_crd(plane)
        print(
            f"processes: {RECORDS} records on {SHARDS} shards, {HASH_ROUNDS} sha256 rounds a "
            f"record, one pod, {os.cpu_count()} cores, kinesalite:"
        )
        rates = {n: measure(plane, api, emulator, work, n) for n in (1, 2)}
        for n, rate in rates.items():
            print(f"  processes {n}: {rate:7.0f} records/s")
        speedup = rates[2] / rates[1]
        print(f"  CPU-bound: two processes {speedup:.2f}x one")
        record(
            {
                "processes_1_cpu_bound_records_per_second": round(rates[1]),
                "processes_2_cpu_bound_records_per_second": round(rates[2]),
                "processes_cpu_bound_speedup": round(speedup, 2),
            }
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
