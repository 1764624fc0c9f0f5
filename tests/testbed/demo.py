"""`make demo`: the whole system on this machine, in one command.

Starts a real control plane and the Kinesis emulator, installs the CRD, runs the operator
and the local kubelet, applies a StreamConsumer (3 workers over 4 shards), produces
records, and shows per shard who owns it, its lag and what was processed. Midway it
splits a shard and kills a worker pod. It ends with the tally — produced, processed,
duplicates, lost (must be 0) — and cleans up after itself."""

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

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from testbed.controlplane import ControlPlane
from testbed.kinesis import KinesisEmulator, list_all_shards, split_shard_in_half
from testbed.scenario import Scenario, wait_for

CRD = Path(__file__).resolve().parents[2] / "crds" / "streamconsumer.yaml"
console = Console()


def view(scenario: Scenario, phase: str) -> Group:
    status = scenario.status()
    report = scenario.report()
    processed = Counter({shard: len(data) for shard, data in report.by_shard.items()})
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
        f"produced [bold]{len(scenario.produced)}[/]",
        f"processed [bold]{report.processed}[/]",
        f"duplicates [bold]{report.duplicates}[/]",
        f"waiting [bold]{len(report.lost)}[/]",
        f"workers [bold]{len(status.get('workers', {}))}[/]",
        f"Ready={ready.get('status', '?')} ({ready.get('message', '')})",
    )
    return Group(table, totals)


def run(duration: float, workdir: Path) -> int:
    console.print("[bold]1/4[/] control plane (etcd, kube-apiserver, kube-controller-manager)…")
    plane = ControlPlane.start(workdir / "control-plane")
    emulator: KinesisEmulator | None = None
    scenario: Scenario | None = None
    try:
        applied = plane.kubectl("apply", "--server-side", "-f", str(CRD))
        if applied.returncode != 0:
            console.print(applied.stderr)
            return 1
        plane.kubectl("wait", "--for=condition=Established", "-f", str(CRD))
        wait_for(lambda: plane.kubectl("get", "streamconsumers", "-A").returncode == 0, 60, "CRD")
        console.print("[bold]2/4[/] Kinesis emulator (kinesis-local)…")
        emulator = KinesisEmulator.start("kinesis-local", workdir / "kinesis")
        api = k8s_config.new_client_from_config(config_file=str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="demo")))
        console.print("[bold]3/4[/] operator, local kubelet, StreamConsumer (3 workers, 4 shards)…")
        scenario = Scenario(plane, api, emulator, "demo", "clicks", workdir / "scenario")
        scenario.start(shards=4, replicas=3, lease_seconds=6.0)
        console.print(f"[bold]4/4[/] producing for {duration:.0f}s; a split and a pod kill midway")
        run_live(scenario, duration)
        report = scenario.report()
        ok = not report.lost and not report.order_violations
        console.print(
            f"\n[bold]Summary[/]: produced {len(scenario.produced)}, processed "
            f"{report.processed} ({report.unique} unique), duplicates {report.duplicates}, "
            f"lost [bold {'green' if ok else 'red'}]{len(report.lost)}[/], "
            f"per-shard order violations {len(report.order_violations)}"
        )
        return 0 if ok else 1
    finally:
        console.print("cleaning up…")
        if scenario is not None:
            scenario.stop()
        if emulator is not None:
            emulator.stop()
        plane.remove()


def run_live(scenario: Scenario, duration: float) -> None:
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.5):
            scenario.produce(25)

    producer = threading.Thread(target=produce, daemon=True)
    started = time.monotonic()
    split_done = killed = False
    phase = "starting"
    with Live(view(scenario, phase), console=console, refresh_per_second=2) as live:
        producer.start()
        while time.monotonic() - started < duration:
            elapsed = time.monotonic() - started
            if not split_done and elapsed > duration * 0.3:
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
            live.update(view(scenario, phase))
            time.sleep(0.5)
        stop.set()
        producer.join()
        phase = "draining: waiting for every record"
        deadline = time.monotonic() + 60
        while scenario.report().lost and time.monotonic() < deadline:
            live.update(view(scenario, phase))
            time.sleep(0.5)
        live.update(view(scenario, "done"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of production")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamconsumer-demo-") as workdir:
        code = 1
        with contextlib.suppress(KeyboardInterrupt):
            code = run(args.duration, Path(workdir))
    sys.exit(code)


if __name__ == "__main__":
    main()
