"""`make demo`: the whole system on this machine, in one command.

Starts a real control plane and the Kinesis emulator, installs the CRD, runs the operator
and the local kubelet, applies a StreamConsumer (workers over 4 shards), produces
records, and shows per shard who owns it, its lag and what was processed. Midway it
splits a shard and kills a worker pod. It cleans up after itself.

`--pipeline recording` (the default) tallies produced, processed, duplicates and lost
(must be 0). `--pipeline spark` runs the clickstream example's Spark pipeline inside the
worker pods; `--pipeline bronze` lands raw batches from JVM-free workers and then runs
the Structured Streaming job over them. Both end by comparing the per-minute page views
with what was produced: each event must be counted exactly once. `--pipeline cdc` reads
a DynamoDB table's changes instead (DynamoDB Local; random puts, overwrites and deletes)
and mirrors them into a Delta table with the CDC example's MERGE; it kills a worker pod
midway (DynamoDB Local cannot split a shard) and ends by comparing the mirror with the
table, row for row."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from cdc.pipeline import read_mirror
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from streamconsumer.sources.dynamodb_streams import partition_key
from streamconsumer.spark import jars
from streamconsumer.spark.session import JARS_DIR_ENV
from testbed.clickstream import PYTHONPATH, ClickstreamRun
from testbed.controlplane import ControlPlane
from testbed.dynamodb import DynamoDBLocal, scan_all
from testbed.kinesis import KinesisEmulator, list_all_shards, split_shard_in_half
from testbed.scenario import Scenario
from testbed.table_scenario import TableScenario
from testbed.waiting import wait_for

CRD = Path(__file__).resolve().parents[2] / "crds" / "streamconsumer.yaml"
console = Console()


class Pipeline(Protocol):
    """What the demo runs behind the processor, and how it tells that nothing was lost."""

    replicas: int
    splits: bool  # whether the source can split a shard midway (DynamoDB Local cannot)

    def start(self) -> None: ...
    def produce(self) -> None: ...
    def progress(self) -> tuple[Counter[str], list[str]]:
        """Per shard: records done; and the totals line. One read of the output."""
        ...

    def done(self) -> bool: ...
    def finish(self) -> bool: ...


class RecordingPipeline:
    """The recording processor: every record written down, then tallied."""

    replicas = 3
    splits = True

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    def start(self) -> None:
        self.scenario.start(shards=4, replicas=self.replicas, lease_seconds=6.0)

    def produce(self) -> None:
        self.scenario.produce(25)

    def progress(self) -> tuple[Counter[str], list[str]]:
        report = self.scenario.report()
        by_shard = Counter({shard: len(data) for shard, data in report.by_shard.items()})
        return by_shard, [
            f"produced [bold]{len(self.scenario.produced)}[/]",
            f"processed [bold]{report.processed}[/]",
            f"duplicates [bold]{report.duplicates}[/]",
            f"waiting [bold]{len(report.lost)}[/]",
        ]

    def done(self) -> bool:
        return not self.scenario.report().lost

    def finish(self) -> bool:
        report = self.scenario.report()
        ok = not report.lost and not report.order_violations
        console.print(
            f"\n[bold]Summary[/]: produced {len(self.scenario.produced)}, processed "
            f"{report.processed} ({report.unique} unique), duplicates {report.duplicates}, "
            f"lost [bold {'green' if ok else 'red'}]{len(report.lost)}[/], "
            f"per-shard order violations {len(report.order_violations)}"
        )
        return ok


class ClickstreamPipeline:
    """The clickstream example on Spark: page views per minute, each event counted once."""

    replicas = 2  # each worker starts a JVM (spark mode): two fit two cores
    splits = True

    def __init__(self, scenario: Scenario, mode: str, workdir: Path) -> None:
        self.run = ClickstreamRun(scenario, mode, workdir)

    def start(self) -> None:
        self.run.start(shards=4, replicas=self.replicas, lease_seconds=6.0)

    def produce(self) -> None:
        self.run.produce(25)

    def progress(self) -> tuple[Counter[str], list[str]]:
        by_shard = self.run.by_shard()
        verb = "landed" if self.run.mode == "bronze" else "counted"
        return by_shard, [
            f"events produced [bold]{len(self.run.events)}[/]",
            f"{verb} [bold]{sum(by_shard.values())}[/]",
        ]

    def done(self) -> bool:
        return sum(self.run.by_shard().values()) >= len(self.run.events)

    def finish(self) -> bool:
        if self.run.mode == "bronze":
            console.print("bronze job: Structured Streaming over the landed files (--once)…")
            job = self.run.run_bronze_job()
            if job.returncode != 0:
                console.print(job.stderr[-3000:])
                return False
        counted, expected = self.run.counted() or Counter(), self.run.expected()
        table = Table(title="page views per minute (busiest first)")
        for column in ("minute", "page", "views", "produced"):
            table.add_column(column, justify="right" if column in ("views", "produced") else "left")
        for (minute, page), views in expected.most_common(8):
            table.add_row(minute, page, str(counted.get((minute, page), 0)), str(views))
        console.print(table)
        ok = counted == expected
        console.print(
            f"[bold]Summary[/]: events produced {len(self.run.events)}, counted "
            f"{sum(counted.values())} across {len(counted)} (minute, page) pairs; "
            f"matches what was produced: [bold {'green' if ok else 'red'}]{ok}[/]"
        )
        return ok


class CdcPipeline:
    """The CDC example: a table's changes mirrored into Delta with MERGE, on Spark in the
    worker pods; done when the mirror equals the table, row for row."""

    replicas = 2  # each worker starts a JVM
    splits = False

    def __init__(self, scenario: TableScenario, workdir: Path) -> None:
        self.scenario = scenario
        self.mirror = str(workdir / "mirror")

    def start(self) -> None:
        # Fetched here, once (the first time on a machine), not by every worker at once.
        delta_jars = jars.cached()
        self.scenario.start(
            shards=1,
            replicas=self.replicas,
            lease_seconds=10.0,
            processor="cdc.pipeline:MirrorToDelta",
            processor_env={
                "PYTHONPATH": PYTHONPATH,
                "CDC_OUTPUT": self.mirror,
                "CDC_BATCH_SECONDS": "2",
                "SPARK_DRIVER_MEMORY": "512m",
                JARS_DIR_ENV: str(delta_jars),  # as the Spark worker image sets it
            },
        )

    def produce(self) -> None:
        self.scenario.produce(10)

    def rows(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(table, mirror): key -> item."""
        items = scan_all(self.scenario.dynamodb.client, self.scenario.table)
        table = {partition_key({"pk": item["pk"]}): item for item in items}
        return table, dict(read_mirror(self.mirror) or {})

    def progress(self) -> tuple[Counter[str], list[str]]:
        table, mirror = self.rows()
        shards = self.scenario.status().get("leases", {})
        return Counter({shard: len(mirror) for shard in shards}), [
            f"changes made [bold]{len(self.scenario.produced)}[/]",
            f"table rows [bold]{len(table)}[/]",
            f"mirror rows [bold]{len(mirror)}[/]",
            f"equal [bold]{table == mirror}[/]",
        ]

    def done(self) -> bool:
        table, mirror = self.rows()
        return table == mirror

    def finish(self) -> bool:
        table, mirror = self.rows()
        ok = table == mirror
        wrong = sum(1 for key in table.keys() | mirror.keys() if table.get(key) != mirror.get(key))
        console.print(
            f"\n[bold]Summary[/]: changes made {len(self.scenario.produced)}; table rows "
            f"{len(table)}, Delta mirror rows {len(mirror)}, rows that differ "
            f"[bold {'green' if ok else 'red'}]{wrong}[/]"
        )
        return ok


def view(scenario: Scenario, pipeline: Pipeline, phase: str) -> Group:
    status = scenario.status()
    processed, totals_line = pipeline.progress()
    table = Table(title=f"StreamConsumer {scenario.namespace}/{scenario.name} — {phase}")
    table.add_column("shard", no_wrap=True, min_width=20)
    for column in ("state", "owner", "epoch", "lag ms", "processed", "checkpoint"):
        numeric = column in ("epoch", "lag ms", "processed")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for shard, lease in sorted(status.get("leases", {}).items()):
        checkpoint = lease.get("checkpoint") or "-"
        table.add_row(
            shard,
            lease.get("state", "?"),
            (lease.get("owner") or "-").rsplit("-", 1)[-1],
            str(lease.get("epoch", 0)),
            str(lease.get("millisBehindLatest", "-")),
            str(processed.get(shard, 0)),
            checkpoint if len(checkpoint) < 12 else "…" + checkpoint[-8:],
        )
    conditions: list[dict[str, str]] = status.get("conditions", [])
    ready = next((c for c in conditions if c["type"] == "Ready"), {})
    totals = Table.grid(padding=(0, 2))
    totals.add_row(
        *totals_line,
        f"workers [bold]{len(status.get('workers', {}))}[/]",
        f"Ready={ready.get('status', '?')} ({ready.get('message', '')})",
    )
    return Group(table, totals)


def run(duration: float, workdir: Path, pipeline_name: str) -> int:
    console.print("[bold]1/4[/] control plane (etcd, kube-apiserver, kube-controller-manager)…")
    plane = ControlPlane.start(workdir / "control-plane")
    emulator: KinesisEmulator | None = None
    dynamodb: DynamoDBLocal | None = None
    scenario: Scenario | None = None
    try:
        applied = plane.kubectl("apply", "--server-side", "-f", str(CRD))
        if applied.returncode != 0:
            console.print(applied.stderr)
            return 1
        plane.kubectl("wait", "--for=condition=Established", "-f", str(CRD))
        wait_for(lambda: plane.kubectl("get", "streamconsumers", "-A").returncode == 0, 60, "CRD")
        api = k8s_config.new_client_from_config(config_file=str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="demo")))
        pipeline: Pipeline
        if pipeline_name == "cdc":
            console.print("[bold]2/4[/] DynamoDB Local (in a network namespace of its own)…")
            dynamodb = DynamoDBLocal.start(workdir / "dynamodb")
            table = TableScenario(plane, api, dynamodb, "demo", "orders", workdir / "scenario")
            scenario, pipeline = table, CdcPipeline(table, workdir / "data")
        else:
            console.print("[bold]2/4[/] Kinesis emulator (kinesis-local)…")
            emulator = KinesisEmulator.start("kinesis-local", workdir / "kinesis")
            scenario = Scenario(plane, api, emulator, "demo", "clicks", workdir / "scenario")
            pipeline = (
                RecordingPipeline(scenario)
                if pipeline_name == "recording"
                else ClickstreamPipeline(scenario, pipeline_name, workdir / "data")
            )
        shards = 4 if pipeline.splits else 1
        console.print(
            f"[bold]3/4[/] operator, local kubelet, StreamConsumer ({pipeline.replicas} workers, "
            f"{shards} shard{'s' if shards > 1 else ''}, pipeline: {pipeline_name})…"
        )
        pipeline.start()
        midway = "a split and a pod kill" if pipeline.splits else "a pod kill"
        console.print(f"[bold]4/4[/] producing for {duration:.0f}s; {midway} midway")
        run_live(scenario, pipeline, duration)
        return 0 if pipeline.finish() else 1
    finally:
        console.print("cleaning up…")
        if scenario is not None:
            scenario.stop()
        if emulator is not None:
            emulator.stop()
        if dynamodb is not None:
            dynamodb.stop()
        plane.remove()


def run_live(scenario: Scenario, pipeline: Pipeline, duration: float) -> None:
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.5):
            pipeline.produce()

    producer = threading.Thread(target=produce, daemon=True)
    started = time.monotonic()
    split_done = killed = False
    phase = "starting"
    with Live(view(scenario, pipeline, phase), console=console, refresh_per_second=2) as live:
        producer.start()
        while time.monotonic() - started < duration:
            elapsed = time.monotonic() - started
            if pipeline.splits and not split_done and elapsed > duration * 0.3:
                shard = sorted(
                    s["ShardId"] for s in list_all_shards(scenario.kinesis.client, scenario.stream)
                )[0]
                split_shard_in_half(scenario.kinesis.client, scenario.stream, shard)
                split_done, phase = True, f"split {shard}"
            if not killed and elapsed > duration * 0.55 and scenario.kubelet is not None:
                running = scenario.kubelet.running()
                if running:
                    scenario.kubelet.kill(running[0], signal.SIGKILL)
                    killed, phase = True, f"killed pod {running[0]} (kill -9)"
            live.update(view(scenario, pipeline, phase))
            time.sleep(0.5)
        stop.set()
        producer.join()
        phase = "draining: waiting for every record"
        deadline = time.monotonic() + 120
        while not pipeline.done() and time.monotonic() < deadline:
            live.update(view(scenario, pipeline, phase))
            time.sleep(0.5)
        live.update(view(scenario, pipeline, "done"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of production")
    parser.add_argument(
        "--pipeline",
        choices=("recording", "spark", "bronze", "cdc"),
        default="recording",
        help="what the workers run (default: recording)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamconsumer-demo-") as workdir:
        code = 1
        with contextlib.suppress(KeyboardInterrupt):
            code = run(args.duration, Path(workdir), args.pipeline)
    sys.exit(code)


if __name__ == "__main__":
    main()
