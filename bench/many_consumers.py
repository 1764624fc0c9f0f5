"""Many consumers on one operator (issue 41): 200 StreamConsumers of 50 shards each on
kinesalite, one real operator process, two simulated workers a consumer (the worker
API's heartbeats and a checkpoint of each shard held every 10 s; bench/simulated_workers.py).
The figures, over a window once every shard is held: the operator's CPU and peak memory,
status writes a second, and etcd's WAL bytes and db growth a second from its own
metrics, beside the floor: the bytes of the checkpoints saved (shard ids and sequence
numbers) a second."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench.etcd_cost import etcd_metric
from bench.results import record
from bench.scratch import scratch_plane, with_the_crd
from bench.simulated_workers import (
    Calls,
    cpu_seconds,
    peak_rss_mib,
    pod_client,
    simulate_worker,
    worker_tokens,
)
from bench.system import StatusWatch, exists, namespace
from streamconsumer.controller.config import OperatorConfig
from testbed.kinesis import KinesisEmulator, create_stream
from testbed.operator_process import OperatorProcess
from testbed.scenario import Scenario
from testbed.waiting import wait_for

CONSUMERS = 200
SHARDS = 50
WORKERS = 2  # a consumer's
LEASE_SECONDS = 30.0
CYCLE_SECONDS = 10.0  # a heartbeat and a checkpoint of each shard held
WINDOW_SECONDS = 60.0
SHARD_ID_AND_SEQUENCE = len("shardId-000000000000") + 56
PRODUCTION_TIMING = {  # not the test bed's brisk ones: an operator as the chart runs it
    f"STREAMCONSUMER_{setting.upper()}": str(OperatorConfig.model_fields[setting].default)
    for setting in (
        "leader_lease_seconds",
        "leader_renew_deadline_seconds",
        "leader_retry_seconds",
        "shard_sync_seconds",
    )
}


def loop_lag(operator: OperatorProcess) -> dict[str, float]:
    """The operator's event loop lag since it started (metrics.LOOP_LAG): the mean, and
    the share of wake-ups more than a second late."""
    name = "streamconsumer_event_loop_lag_seconds"
    count = operator.metric(f"{name}_count") or 0.0
    within = operator.metric(f"{name}_bucket", le="1.0") or 0.0
    total = operator.metric(f"{name}_sum") or 0.0
    if not count:
        return {"mean": float("nan"), "over_1s": float("nan")}
    return {"mean": total / count, "over_1s": 1 - within / count}


def main() -> None:
    with contextlib.ExitStack() as cleanup:
        work, plane = cleanup.enter_context(scratch_plane("streamconsumer-bench-many-"))
        kinesis = cleanup.enter_context(
            KinesisEmulator.start(
                "kinesalite",
                work / "kinesalite",
                operation_delay_ms=0,
                shard_limit=CONSUMERS * SHARDS,
            )
        )
        api = with_the_crd(plane)
        ns = namespace(api, "bench-many")
        names = [f"c{i:03d}" for i in range(CONSUMERS)]
        print(f"{CONSUMERS} consumers x {SHARDS} shards on one operator: creating streams")
        for name in names:
            create_stream(kinesis.client, name, SHARDS)
        scenario = Scenario(plane, api, kinesis, ns, names[0], work / "many", name=names[0])
        scenario.operator_env = PRODUCTION_TIMING
        scenario.start_operator()
        cleanup.callback(scenario.stop)
        kept_log = Path(tempfile.gettempdir()) / "streamconsumer-bench-many-operator.log"
        cleanup.callback(shutil.copyfile, work / "many" / "operator" / "operator.log", kept_log)
        for name in names:
            manifest = scenario.manifest(replicas=WORKERS, lease_seconds=LEASE_SECONDS, delay=0)
            manifest["metadata"]["name"] = name
            manifest["spec"]["source"]["kinesis"]["streamName"] = name
            scenario.consumers.create(manifest)
        core = k8s.CoreV1Api(api)
        tokens: dict[str, dict[str, str]] = {}
        for n, name in enumerate(names):
            account = f"{name}-worker"
            wait_for(lambda a=account: exists(core, ns, a), 600, f"{account}")  # type: ignore[misc]
            tokens[name] = worker_tokens(core, ns, name, account, WORKERS)
            if n % 50 == 49:
                print(f"  {n + 1} consumers created, their workers' tokens issued")
        operator = scenario.operator
        assert operator is not None
        assert operator.server is not None
        pid = operator.server.pid
        url = f"{operator.url}/v1/namespaces/{ns}/streamconsumers"
        watch = StatusWatch(api, ns, None).start()
        cleanup.callback(watch.stop)
        calls = Calls()

        async def run() -> dict[str, Any]:
            # 400 new workers' first TokenReviews take about 2 minutes on the test bed's
            # 2 cores (4 at a time): the window measures the steady state after them.
            warmup = 3 * CYCLE_SECONDS + 120
            start = time.monotonic()
            deadline = start + warmup + WINDOW_SECONDS
            workers = [
                (name, worker, token)
                for name, named in tokens.items()
                for worker, token in named.items()
            ]
            async with contextlib.AsyncExitStack() as clients:
                tasks = [
                    asyncio.create_task(
                        simulate_worker(
                            await clients.enter_async_context(pod_client(index)),
                            f"{url}/{name}",
                            worker,
                            token,
                            CYCLE_SECONDS,
                            deadline,
                            calls,
                        )
                    )
                    for index, (name, worker, token) in enumerate(workers)
                ]
                await asyncio.sleep(warmup)
                before = {
                    "cpu": cpu_seconds(pid),
                    "wall": time.monotonic(),
                    "writes": watch.count,
                    "checkpoints": calls.checkpoints,
                    "heartbeats": calls.heartbeats,
                    "refused": calls.refused,
                    "failed": calls.failed_checkpoints,
                    "wal": etcd_metric(plane, "etcd_disk_wal_write_bytes_total"),
                    "db": etcd_metric(plane, "etcd_mvcc_db_total_size_in_bytes"),
                }
                await asyncio.sleep(WINDOW_SECONDS)
                wall = time.monotonic() - before["wall"]
                figures = {
                    "cores": (cpu_seconds(pid) - before["cpu"]) / wall,
                    "writes": (watch.count - before["writes"]) / wall,
                    "checkpoints": (calls.checkpoints - before["checkpoints"]) / wall,
                    "heartbeats": (calls.heartbeats - before["heartbeats"]) / wall,
                    "refused": calls.refused - before["refused"],
                    "failed": calls.failed_checkpoints - before["failed"],
                    "slowest": calls.slowest,
                    "wal": (etcd_metric(plane, "etcd_disk_wal_write_bytes_total") - before["wal"])
                    / wall,
                    "db": (etcd_metric(plane, "etcd_mvcc_db_total_size_in_bytes") - before["db"])
                    / wall,
                    "rss": peak_rss_mib(pid),
                    "lag": loop_lag(operator),
                    "leading": operator.metric("streamconsumer_leader") == 1.0,
                }
                await asyncio.gather(*tasks)
            return figures

        m = asyncio.run(run())
        owned = sum(
            len(scenario.consumers.get(n).get("status", {}).get("workers") or {}) for n in names
        )
        led = m["leading"] and operator.exit_code() is None
        floor = m["checkpoints"] * SHARD_ID_AND_SEQUENCE
        ratio = m["wal"] / floor if floor else float("nan")  # none saved: no ratio
        print(f"  over {WINDOW_SECONDS:.0f} s ({owned} workers listed as holding shards):")
        print(
            f"  checkpoints saved          {m['checkpoints']:8.1f} /s  ({floor / 1024:.1f} KiB/s)"
        )
        print(
            f"  heartbeats                 {m['heartbeats']:8.1f} /s  "
            f"({m['refused']:.0f} refused in the window)"
        )
        print(
            f"  checkpoints failed         {m['failed']:8.0f}     "
            f"(slowest call {m['slowest']:.1f} s, of the whole run)"
        )
        print(
            f"  status writes              {m['writes']:8.1f} /s"
            + (f"  (undercounted: the watch broke {watch.gaps} times)" if watch.gaps else "")
        )
        answers = ", ".join(f"{code}: {n}" for code, n in sorted(calls.answers.items()))
        print(f"  answers (whole run)        {answers}  (599: none came)")
        for reason, count in calls.reasons.most_common(5):
            print(f"    {count:6d}  {reason}")
        print(f"  operator CPU               {m['cores']:8.2f} cores")
        print(f"  operator peak memory       {m['rss']:8.0f} MiB")
        print(
            f"  operator event loop late   {m['lag']['mean']:8.2f} s on average, "
            f"{m['lag']['over_1s']:.0%} of wake-ups over 1 s"
        )
        print(f"  operator led throughout    {'yes' if led else 'NO: it lost its Lease'}")
        print(
            f"  etcd WAL                   {m['wal'] / 1024:8.1f} KiB/s  "
            f"({ratio:.2f}x the checkpoints' bytes)"
        )
        print(f"  etcd db growth             {m['db'] / 1024:8.1f} KiB/s")
        record(
            {
                "many_consumers_operator_cores": round(m["cores"], 3),
                "many_consumers_operator_peak_mib": round(m["rss"]),
                "many_consumers_status_writes_per_second": round(m["writes"], 1),
                "many_consumers_checkpoints_per_second": round(m["checkpoints"], 1),
                "many_consumers_etcd_wal_kib_per_second": round(m["wal"] / 1024, 1),
                "many_consumers_etcd_amplification": round(ratio, 2),
                "many_consumers_etcd_db_growth_kib_per_second": round(m["db"] / 1024, 1),
                "many_consumers_loop_lag_mean_seconds": round(m["lag"]["mean"], 3),
                "many_consumers_operator_led_throughout": led,
            }
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
