"""`make bench-peers`: KCL (3.1.3 through amazon-kclpy) and our worker side by side, on one
kinesalite, the same records, the same processor logic (bench/peers/tally.py: note each
record, checkpoint each batch), the same lease duration, poll interval and batch size.

Per run, for each side:
1. throughput: 1 worker over 4 shards, 2 workers over 8 shards, reading the same
   pre-produced records: records/s (first to last record processed), CPU seconds per
   100k records (the workers' process trees, JVM + Python children for KCL), peak RSS;
   every record processed (distinct sequence numbers per shard), start-up to first record;
2. latency: 1 worker over 4 shards, a producer putting timestamped records at a steady
   rate; p50/p99 of put -> process_records;
3. rebalance: a second worker joins a running first: seconds until it processes its share,
   duplicates during the move;
4. failover: kill -9 of one of two workers: seconds until its shards process elsewhere;
and KCL's start-up with its default settings. Figures: bench/results.json and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from streamconsumer.models.resource import MAX_READS_PER_SECOND

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from bench.peers.install import BUILD  # noqa: E402
from bench.peers.kcl import DynamoDBLocal, LoopbackNamespace, tuned  # noqa: E402
from bench.peers.measure import Processed, Sampler, TallyReader, percentile  # noqa: E402
from bench.peers.sides import KclSide, OursSide, Side  # noqa: E402
from bench.peers.tally import payload  # noqa: E402
from bench.results import record  # noqa: E402
from bench.scratch import api_client, scratch_plane, with_the_crd  # noqa: E402
from testbed.background import BackgroundLoop  # noqa: E402
from testbed.controlplane import ControlPlane  # noqa: E402
from testbed.kinesis import (  # noqa: E402
    KinesisEmulator,
    create_stream,
    kinesis_client,
    put_records,
)
from testbed.waiting import wait_for  # noqa: E402

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

LEASE_SECONDS = 6
IDLE_MS = 100  # our StreamConsumer's reading.idleBetweenReadsMs in the test bed
MAX_RECORDS = 1000
RATE = 500  # records/s for the latency run
MOVE_RATE = 200  # records/s while a worker joins or dies
Figures = dict[str, float]


class Producer(BackgroundLoop):
    """Puts `rate` timestamped records a second (every tenth of a second, in batches)
    from a thread, until stopped; keeps the (shard, sequence number) of each record."""

    join_seconds = 30.0  # a put in flight finishes

    def __init__(self, client: KinesisClient, stream: str, rate: int) -> None:
        self.client, self.stream, self.rate = client, stream, rate
        self.batches: list[set[tuple[str, str]]] = []
        super().__init__()

    def placed(self) -> set[tuple[str, str]]:
        return set().union(*self.batches)

    def _run(self) -> None:
        tick = time.monotonic()
        while not self._stopping.is_set():
            batch = [(f"p{tick}-{i}", payload()) for i in range(self.rate // 10)]
            self.batches.append(set(put_records(self.client, self.stream, batch)))
            tick += 0.1
            self._stopping.wait(max(0.0, tick - time.monotonic()))


def first_by_shard(
    processed: list[Processed], counts: Callable[[Processed], bool]
) -> dict[str, float]:
    """When each shard's first record that `counts` was processed."""
    firsts: dict[str, float] = {}
    for r in processed:
        if counts(r):
            firsts[r.shard] = min(firsts.get(r.shard, r.at), r.at)
    return firsts


def moment(
    measure: Callable[[], float | None], timeout: float, what: str, poll: float = 0.5
) -> float:
    """Waits until `measure()` finds its moment, and returns that moment."""
    wait_for(lambda: measure() is not None, timeout, what, poll=poll)
    return measure() or 0.0


def wait_all_processed(
    side: Side,
    reader: TallyReader,
    expected: set[tuple[str, str]],
    timeout: float = 120,
    poll: float = 0.5,
) -> None:
    wait_for(
        lambda: not reader.missing(expected),
        timeout,
        f"{side.name} to process every record",
        poll=poll,
    )


class Bench:
    def __init__(
        self,
        plane: ControlPlane,
        kinesis: KinesisEmulator,
        dynamodb: DynamoDBLocal,
        work: Path,
        records: int,
        ours_reads_per_second: float | None = None,
    ) -> None:
        self.plane, self.kinesis, self.dynamodb = plane, kinesis, dynamodb
        self.work, self.records = work, records
        self.ours_reads_per_second = ours_reads_per_second
        self.api = api_client(plane)
        self._serial = 0

    def _name(self, what: str) -> str:
        self._serial += 1
        return f"{what}-{self._serial}"

    def side(self, kind: str, stream: str, settings: dict[str, str] | None = None) -> Side:
        name = self._name(f"{kind}-{stream}")
        workdir = self.work / name
        if kind == "kcl":
            chosen = (
                tuned(LEASE_SECONDS * 1000, IDLE_MS, MAX_RECORDS) if settings is None else settings
            )
            return KclSide(self.kinesis, self.dynamodb, stream, name, workdir, chosen)
        return OursSide(
            self.plane,
            self.api,
            self.kinesis,
            stream,
            name,
            workdir,
            LEASE_SECONDS,
            MAX_RECORDS,
            self.ours_reads_per_second,
        )

    def fill(self, stream: str, shards: int) -> set[tuple[str, str]]:
        create_stream(self.kinesis.client, stream, shards)
        placed = put_records(
            self.kinesis.client, stream, [(f"k{i}", payload()) for i in range(self.records)]
        )
        return set(placed)

    # --- experiments ----------------------------------------------------------------

    def throughput(self, side: Side, workers: int, expected: set[tuple[str, str]]) -> Figures:
        reader = TallyReader(side.out)
        started = time.time()
        with contextlib.ExitStack() as stack:
            stack.callback(side.stop)
            side.start(workers)
            sampler = stack.enter_context(Sampler(side.roots))
            store = stack.enter_context(Sampler(side.store_roots))
            wait_all_processed(side, reader, expected, timeout=900, poll=1.0)
            time.sleep(0.5)  # one more sample past the last record
        got = reader.read()
        first, last = min(r.at for r in got), max(r.at for r in got)
        for worker in sorted({r.worker for r in got}):
            mine = [r for r in got if r.worker == worker]
            print(
                f"    {worker}: {len(mine)} records from {len({r.shard for r in mine})} shards,"
                f" {min(r.at for r in mine) - first:.1f}-{max(r.at for r in mine) - first:.1f} s"
                " after the first record",
                flush=True,
            )
        n = len(expected)
        return {
            "records_per_second": n / (last - first),
            "cpu_seconds_per_100k": (sampler.cpu_at(last) - sampler.cpu_at(first)) / n * 1e5,
            "store_cpu_seconds_per_100k": (store.cpu_at(last) - store.cpu_at(first)) / n * 1e5,
            "peak_rss_mib": sampler.peak_rss / 2**20,
            "startup_seconds": first - started,
            "duplicates": reader.duplicates(),
            "workers": workers,
        }

    def experiment(self, kind: str, what: str, shards: int) -> tuple[str, Side, TallyReader]:
        """A new stream of `shards` shards, a side of `kind` to read it, and its tally."""
        stream = self._name(what)
        create_stream(self.kinesis.client, stream, shards)
        side = self.side(kind, stream)
        return stream, side, TallyReader(side.out)

    @contextlib.contextmanager
    def running(self, side: Side, stream: str, rate: int, workers: int) -> Iterator[Producer]:
        """`side` started with `workers` while `rate` records a second are put to `stream`;
        both stopped after."""
        with contextlib.ExitStack() as stack:
            stack.callback(side.stop)
            producer = stack.enter_context(
                Producer(kinesis_client(self.kinesis.endpoint_url), stream, rate)
            )
            side.start(workers)
            yield producer

    def latency(self, kind: str, window: float = 20.0) -> Figures:
        stream, side, reader = self.experiment(kind, "latency", 4)
        with self.running(side, stream, RATE, workers=1) as producer:
            wait_for(lambda: bool(reader.read()), 300, f"{side.name}'s first record", poll=0.5)
            begin = time.time() + 5  # settled
            time.sleep(5 + window)
            end = time.time()
            producer.stop()  # then the worker drains what is left
            wait_all_processed(side, reader, producer.placed())
        delays = [(r.at - r.put) * 1000 for r in reader.read() if begin <= r.put <= end]
        return {
            "latency_p50_ms": percentile(delays, 0.5),
            "latency_p99_ms": percentile(delays, 0.99),
            "latency_samples": len(delays),
        }

    def rebalance(self, kind: str, shards: int = 4) -> Figures:
        stream, side, reader = self.experiment(kind, "rebalance", shards)
        with self.running(side, stream, MOVE_RATE, workers=1) as producer:
            wait_for(
                lambda: len({r.shard for r in reader.read()}) == shards,
                300,
                f"{side.name}'s first worker on all shards",
                poll=0.5,
            )
            time.sleep(3)
            first = {r.worker for r in reader.read()}
            joined = time.time()
            side.add()

            def share_taken() -> float | None:
                by_shard = first_by_shard(
                    reader.read(), lambda r: r.worker not in first and r.at >= joined
                )
                times = sorted(by_shard.values())
                return times[shards // 2 - 1] if len(times) >= shards // 2 else None

            taken = moment(share_taken, 180, f"{side.name}'s second worker to take its share")
            seconds = taken - joined
            time.sleep(5)
            producer.stop()
            wait_all_processed(side, reader, producer.placed())
        return {"rebalance_seconds": seconds, "rebalance_duplicates": reader.duplicates()}

    def failover(self, kind: str, shards: int = 4) -> Figures:
        stream, side, reader = self.experiment(kind, "failover", shards)

        def holders(since: float) -> dict[str, set[str]]:
            held: dict[str, set[str]] = {}
            for r in reader.read():
                if r.at >= since:
                    held.setdefault(r.worker, set()).add(r.shard)
            return held

        with self.running(side, stream, MOVE_RATE, workers=2) as producer:
            # Both workers processing, on disjoint halves, for the last 3 seconds.
            wait_for(
                lambda: (
                    sorted(len(s) for s in holders(time.time() - 3).values())
                    == [shards // 2, shards // 2]
                ),
                180,
                f"{side.name}: 2 workers, 2 shards each",
                poll=0.5,
            )
            held = holders(time.time() - 3)
            # A worker, not KCL's leader: that is the crash both sides share (killing KCL's
            # leader is the counterpart of killing our operator, a different test).
            wait_for(lambda: bool(side.followers() & set(held)), 60, "a follower", poll=0.5)
            victim = sorted(side.followers() & set(held))[0]
            moved = held[victim]
            killed = time.time()
            side.kill(victim)

            def resumed() -> float | None:
                firsts = first_by_shard(
                    reader.read(),
                    lambda r: r.shard in moved and r.worker != victim and r.at > killed,
                )
                return max(firsts.values()) if len(firsts) == len(moved) else None

            what = f"{side.name}: the killed worker's shards to process elsewhere"
            seconds = moment(resumed, 120, what, poll=0.2) - killed
            producer.stop()
            wait_all_processed(side, reader, producer.placed())
        return {"failover_seconds": seconds, "failover_duplicates": reader.duplicates()}

    def kcl_default_startup(self, stream: str) -> float:
        side = self.side("kcl", stream, settings={})
        reader = TallyReader(side.out)
        started = time.time()
        try:
            side.start(1)
            wait_for(lambda: bool(reader.read()), 600, "KCL (defaults)'s first record", poll=0.5)
            return min(r.at for r in reader.read()) - started
        finally:
            side.stop()


def one_run(bench: Bench, run: int, parts: set[str], say: Callable[[str], None]) -> Figures:
    figures: Figures = {}

    def keep(prefix: str, values: Figures) -> None:
        for key, value in values.items():
            figures[f"{prefix}_{key}"] = value
        say(f"  {prefix}: " + ", ".join(f"{k} {v:.1f}" for k, v in values.items()))

    if "throughput" in parts:
        for workers, shards in ((1, 4), (2, 8)):
            stream = bench._name(f"tp{shards}")
            expected = bench.fill(stream, shards)
            for kind in ("kcl", "ours"):
                say(
                    f"run {run}: {kind}, {workers} worker(s) over {shards} shards, "
                    f"{len(expected)} records"
                )
                values = bench.throughput(bench.side(kind, stream), workers, expected)
                keep(f"{kind}_{workers}w{shards}s", values)
            if shards == 4 and "startup" in parts:
                say(f"run {run}: kcl start-up with its default settings")
                keep("kcl_default", {"startup_seconds": bench.kcl_default_startup(stream)})
    for part, experiment in (
        ("latency", bench.latency),
        ("rebalance", bench.rebalance),
        ("failover", bench.failover),
    ):
        if part in parts:
            for kind in ("kcl", "ours"):
                say(f"run {run}: {kind}, {part}")
                try:
                    keep(kind, experiment(kind))
                except AssertionError as failed:  # a time-out: reported, not a figure
                    say(f"  {kind}: {part} FAILED: {failed}")
                    figures[f"{kind}_{part}_failed"] = 1
    return figures


# (key in a run's figures, label, unit, digits) for the table, README and results.json
ROWS = [
    ("1w4s_records_per_second", "throughput, 1 worker / 4 shards", "records/s", 0),
    ("2w8s_records_per_second", "throughput, 2 workers / 8 shards", "records/s", 0),
    ("1w4s_cpu_seconds_per_100k", "CPU per 100k records, 1 worker", "s", 1),
    ("2w8s_cpu_seconds_per_100k", "CPU per 100k records, 2 workers", "s", 1),
    ("1w4s_peak_rss_mib", "peak RSS, 1 worker / 4 shards", "MiB", 0),
    ("2w8s_peak_rss_mib", "peak RSS, 2 workers / 8 shards (sum)", "MiB", 0),
    ("latency_p50_ms", f"latency p50 at {RATE}/s", "ms", 0),
    ("latency_p99_ms", f"latency p99 at {RATE}/s", "ms", 0),
    ("rebalance_seconds", "rebalance: joiner processing its share", "s", 1),
    ("rebalance_duplicates", "rebalance: duplicates", "records", 0),
    ("failover_seconds", "failover after kill -9", "s", 1),
    ("failover_duplicates", "failover: duplicates", "records", 0),
    ("1w4s_startup_seconds", "start-up to first record (tuned)", "s", 1),
    ("1w4s_store_cpu_seconds_per_100k", "checkpoint store CPU per 100k records", "s", 1),
]


def summarize(runs: list[Figures]) -> tuple[Figures, list[tuple[str, str, str, str, str]]]:
    results: Figures = {}
    table = []

    def span(key: str, digits: int) -> tuple[str, list[float]]:
        values = [r[key] for r in runs if key in r]
        if not values:
            return "-", []
        low, high = min(values), max(values)
        text = (
            f"{low:.{digits}f}"
            if round(low, digits) == round(high, digits)
            else (f"{low:.{digits}f}\u2013{high:.{digits}f}")
        )
        return text, values

    for key, label, unit, digits in ROWS:
        row = [label, unit]
        medians = {}
        for kind in ("kcl", "ours"):
            text, values = span(f"{kind}_{key}", digits)
            row.append(text)
            if values:
                name = f"{kind}_{key}"
                medians[kind] = statistics.median(values)
                results[name] = round(medians[kind], 3)
                results[f"{name}_min"] = round(min(values), 3)
                results[f"{name}_max"] = round(max(values), 3)
        if len(medians) == 2 and medians["kcl"]:
            ratio = medians["ours"] / medians["kcl"]
            results[f"ours_vs_kcl_{key}_ratio"] = round(ratio, 3)
            row.append(f"{ratio:.2f}x")
        else:
            row.append("-")
        table.append((row[0], row[1], row[2], row[3], row[4]))
    text, values = span("kcl_default_startup_seconds", 1)
    if values:
        results["kcl_default_startup_seconds"] = round(statistics.median(values), 3)
        results["kcl_default_startup_seconds_min"] = round(min(values), 3)
        results["kcl_default_startup_seconds_max"] = round(max(values), 3)
        table.append(("start-up to first record (KCL defaults)", "s", text, "-", "-"))
    results["peers_runs"] = len(runs)
    return results, table


def show(table: list[tuple[str, str, str, str, str]], runs: int) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dev dependency; plain text without it
        for row in table:
            print(" | ".join(row))
        return
    out = Table(title=f"KCL 3.1.3 (kclpy) vs ours on kinesalite, min\u2013max over {runs} run(s)")
    for column in ("", "unit", "KCL", "ours", "ours/KCL (median)"):
        out.add_column(column, justify="left" if column in ("", "unit") else "right")
    for row in table:
        out.add_row(*row)
    Console().print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--parts", default="throughput,startup,latency,rebalance,failover")
    parser.add_argument(
        "--ours-max-reads-per-second",
        type=float,
        default=None,
        help=f"our reading.maxReadsPerSecond (default: the spec's, {MAX_READS_PER_SECOND:g}); "
        "KCL's reads are paced by its poll interval alone",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    runs: list[Figures] = []
    log = BUILD / "runs"
    log.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")

    def say(text: str) -> None:
        print(text, flush=True)

    # A SIGTERM (make interrupted, a timeout) unwinds like an exception: everything started
    # is stopped by the ExitStacks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as cleanup:
        say("==> control plane, kinesalite, DynamoDB Local (in a loopback-only namespace)")
        work, plane = cleanup.enter_context(scratch_plane("streamconsumer-peers-"))
        kinesis = cleanup.enter_context(
            KinesisEmulator.start("kinesalite", work / "kinesalite", operation_delay_ms=50)
        )
        netns = LoopbackNamespace(work / "netns")
        cleanup.callback(netns.stop)
        dynamodb = DynamoDBLocal.start(netns, work / "dynamodb")
        cleanup.callback(dynamodb.stop)
        with_the_crd(plane)
        bench = Bench(plane, kinesis, dynamodb, work, args.records, args.ours_max_reads_per_second)
        for run in range(1, args.runs + 1):
            figures = one_run(bench, run, parts, say)
            runs.append(figures)
            (log / f"{stamp}-run{run}.json").write_text(json.dumps(figures, indent=2) + "\n")
    results, table = summarize(runs)
    results["peers_records"] = args.records
    record(results)
    show(table, len(runs))
    say(f"figures in bench/results.json; each run's in {log.relative_to(ROOT)}/{stamp}-run*.json")
    reads = args.ours_max_reads_per_second or f"the default ({MAX_READS_PER_SECOND:g})"
    say(
        f"settings: lease {LEASE_SECONDS} s (KCL failoverTimeMillis), poll interval {IDLE_MS} ms "
        f"(KCL idleTimeBetweenReadsInMillis, our reading.idleBetweenReadsMs), batches of "
        f"{MAX_RECORDS}, our reading.maxReadsPerSecond {reads}; KCL's transport to "
        "kinesalite is HTTP/1.1 (a stand-in KinesisClientUtil), not its HTTP/2"
    )


if __name__ == "__main__":
    main()
