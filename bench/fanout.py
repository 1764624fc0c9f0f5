"""Put -> process_records latency, polling against enhanced fan-out, in the same run on
the same emulator (kinesis-local: kinesalite has no stream consumers): the real operator
and worker processes, one worker over 2 shards, a producer putting timestamped records at
a steady rate; p50/p99 of (processed - put) over a window after a warm-up. The polling
side reads with idleBetweenReadsMs 100 (as bench-peers), fan-out as pushed.

kinesis-local pushes SubscribeToShard events once a second (docs/emulators.md), so on it
fan-out's latency is the emulator's cadence, not Kinesis'."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path

from bench.results import percentile, record
from bench.scratch import scratch_plane, with_the_crd
from bench.system import namespace
from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator, put_records
from testbed.scenario import FanOutScenario, Scenario
from testbed.waiting import wait_for

RATE = 40  # records/s: kinesis-local takes hundreds of writes a second, shared by the run
WARM_UP_SECONDS = 10.0
WINDOW_SECONDS = 30.0
TICK_SECONDS = 0.1


def produce(scenario: Scenario, stop: threading.Event, tag: str) -> None:
    """Puts RATE records a second, each carrying its put time, until stopped."""
    per_tick = max(1, round(RATE * TICK_SECONDS))
    counter = 0
    while not stop.is_set():
        started = time.time()
        batch = []
        for _ in range(per_tick):
            batch.append((f"{tag}-{counter}", f"{tag} {counter} {started:.6f}".encode()))
            counter += 1
        put_records(scenario.kinesis.client, scenario.stream, batch)
        stop.wait(max(0.0, TICK_SECONDS - (time.time() - started)))


def latencies_ms(scenario: Scenario, tag: str, since: float, until: float) -> list[float]:
    """(processed - put) of each record put in [since, until), first processing only."""
    first: dict[str, float] = {}
    for path in scenario.records_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            event = json.loads(line)
            name, _, put = event["data"].rpartition(" ")
            if name.startswith(tag) and since <= float(put) < until:
                first[name] = min(first.get(name, float("inf")), event["t"] - float(put))
    return [seconds * 1000 for seconds in first.values()]


def measure(scenario: Scenario, tag: str) -> tuple[float, float, int]:
    scenario.start(shards=2, replicas=1)
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(scenario, stop, tag), daemon=True)
    try:
        producer.start()
        wait_for(lambda: bool(latencies_ms(scenario, tag, 0, 1e12)), 120, f"{tag}: first record")
        since = time.time() + WARM_UP_SECONDS
        time.sleep(WARM_UP_SECONDS + WINDOW_SECONDS)
        until = time.time()
        stop.set()
        producer.join(30)
        time.sleep(5)  # the last records of the window are processed
        values = latencies_ms(scenario, tag, since, until)
    finally:
        stop.set()
        scenario.stop()
    assert values, f"{tag}: no record measured"
    return percentile(values, 0.5), percentile(values, 0.99), len(values)


def run(plane: ControlPlane, emulator: KinesisEmulator, work: Path) -> None:
    api = with_the_crd(plane)
    figures: dict[str, float] = {}
    for kind, scenario_class in (("polling", Scenario), ("fanout", FanOutScenario)):
        scenario = scenario_class(
            plane, api, emulator, namespace(api, f"bench-{kind}"), f"latency-{kind}", work / kind
        )
        p50, p99, count = measure(scenario, kind)
        figures[f"latency_{kind}_p50_ms"] = round(p50, 1)
        figures[f"latency_{kind}_p99_ms"] = round(p99, 1)
        print(f"  {kind:8} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  ({count} records)")
    ratio = figures["latency_fanout_p50_ms"] / figures["latency_polling_p50_ms"]
    figures["latency_fanout_vs_polling_p50_ratio"] = round(ratio, 3)
    print(f"  fan-out p50 = {ratio:.2f}x polling's (baseline, same run, kinesis-local)")
    record(figures)


def main() -> None:
    with contextlib.ExitStack() as cleanup:
        work, plane = cleanup.enter_context(scratch_plane("streamconsumer-bench-fanout-"))
        emulator = cleanup.enter_context(
            KinesisEmulator.start("kinesis-local", work / "kinesis-local")
        )
        print(f"put -> process_records latency, {RATE} records/s over 2 shards, kinesis-local:")
        run(plane, emulator, work)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
