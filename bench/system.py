"""The system under load, on the real parts, each figure beside a baseline measured in
the same run:

- worker throughput over 4 shards (no-op processor) vs a raw boto3 GetRecords loop over
  the same records, both on kinesalite;
- checkpoint round trip through the worker API vs a bare HTTP round trip to the same server;
- failover: a worker killed -> its shards processing elsewhere, vs lease + grace;
- operator failover: the leading operator replica killed -> every shard checkpointing
  again through the standby, vs the leader Lease duration; and a rolling upgrade of the
  operator (the leader stopped, a new replica started): duplicates, lost, longest pause;
- control plane at scale: 1,000 shards, 50 simulated workers heartbeating and
  checkpointing: status writes per second, status size, operator CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s
from kubernetes import watch

from bench.results import record
from bench.scratch import scratch_plane, with_the_crd
from bench.simulated_workers import (
    Calls,
    cpu_seconds,
    pod_client,
    simulate_worker,
    worker_tokens,
)
from streamconsumer.models import GROUP, PLURAL, VERSION
from testbed.background import BackgroundLoop
from testbed.controlplane import ControlPlane
from testbed.handover import hand_over, start_with_two_operators
from testbed.kinesis import KinesisEmulator, create_stream, list_all_shards, put_records
from testbed.operator_process import LEADER_LEASE_SECONDS
from testbed.scenario import Scenario
from testbed.waiting import wait_for

RECORDS = 40_000
PAYLOAD = b"x" * 100


def namespace(api: k8s.ApiClient, name: str) -> str:
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def fill(emulator: KinesisEmulator, stream: str, shards: int, count: int) -> None:
    create_stream(emulator.client, stream, shards)
    keys = [f"k{i}" for i in range(count)]
    with ThreadPoolExecutor(4) as pool:
        chunks = [keys[i : i + 2000] for i in range(0, count, 2000)]
        list(
            pool.map(
                lambda c: put_records(emulator.client, stream, [(k, PAYLOAD) for k in c]), chunks
            )
        )


def raw_read_seconds(emulator: KinesisEmulator, stream: str, expected: int) -> float:
    """Baseline: one thread per shard, GetRecords from TRIM_HORIZON until all are read."""
    shards = [s["ShardId"] for s in list_all_shards(emulator.client, stream)]
    counts = dict.fromkeys(shards, 0)

    def drain(shard: str) -> None:
        client = emulator.client
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while True:
            response = client.get_records(ShardIterator=iterator, Limit=1000)
            counts[shard] += len(response["Records"])
            if not response["Records"] or not response.get("NextShardIterator"):
                return
            iterator = response["NextShardIterator"]

    started = time.perf_counter()
    with ThreadPoolExecutor(len(shards)) as pool:
        list(pool.map(drain, shards))
    elapsed = time.perf_counter() - started
    assert sum(counts.values()) == expected, counts
    return elapsed


def worker_throughput(
    plane: ControlPlane, api: k8s.ApiClient, fast: KinesisEmulator, work: Path
) -> Scenario:
    fill(fast, "throughput", 4, RECORDS)
    raw = raw_read_seconds(fast, "throughput", RECORDS)
    scenario = Scenario(
        plane, api, fast, namespace(api, "bench-throughput"), "throughput", work / "tp"
    )
    scenario.start(
        shards=None, replicas=1, processor="testbed.recording:CountingProcessor", max_records=1000
    )
    counts = scenario.records_dir

    def totals() -> tuple[int, float, float]:
        done, first, last = 0, float("inf"), 0.0
        for path in counts.glob("*.count"):
            n, started, at = path.read_text().split()
            done, first, last = done + int(n), min(first, float(started)), max(last, float(at))
        return done, first, last

    wait_for(lambda: totals()[0] >= RECORDS, 300, "the worker to read every record", poll=0.5)
    _, first, last = totals()
    worker = last - first
    ratio = raw / worker
    print(f"throughput, {RECORDS} records over 4 shards on kinesalite:")
    print(f"  raw boto3 GetRecords loop  {RECORDS / raw:9.0f} records/s  (baseline)")
    print(
        f"  one worker, no-op processor{RECORDS / worker:9.0f} records/s  ({ratio:.2f}x baseline)"
    )
    record(
        {
            "worker_records_per_second": round(RECORDS / worker),
            "raw_records_per_second": round(RECORDS / raw),
            "worker_vs_raw_throughput_ratio": round(ratio, 3),
        }
    )
    return scenario


def checkpoint_rtt(scenario: Scenario) -> None:
    assert scenario.operator is not None
    time.sleep(2)  # the worker is idle: let the last coalesced status write land
    leases = scenario.status()["leases"]
    shard, lease = sorted(leases.items())[0]
    worker = lease["owner"]
    token = (scenario.workdir / "pods" / worker / "streamconsumer-token" / "token").read_text()
    path = f"/v1/namespaces/{scenario.namespace}/streamconsumers/{scenario.name}"
    base = scenario.operator.url + path
    body = {
        "worker": worker,
        "shardId": shard,
        "epoch": lease["epoch"],
        "sequenceNumber": lease["checkpoint"],
    }
    headers = {"Authorization": f"Bearer {token}"}

    def timed(call: Any, n: int) -> list[float]:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            response = call()
            samples.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
        return sorted(samples)

    with httpx.Client() as http:
        http.post(f"{base}/checkpoint", json=body, headers=headers)  # warms the TokenReview cache
        bare = timed(lambda: http.get(f"{scenario.operator.url}/healthz"), 500)
        rtt = timed(lambda: http.post(f"{base}/checkpoint", json=body, headers=headers), 500)
    p50, p99 = rtt[len(rtt) // 2], rtt[int(len(rtt) * 0.99)]
    bare_p50 = bare[len(bare) // 2]
    print("checkpoint round trip through the worker API (500 calls):")
    print(f"  bare HTTP GET /healthz     p50 {bare_p50:6.2f} ms  (baseline)")
    print(
        f"  POST checkpoint            p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
        f"  ({p50 / bare_p50:.1f}x baseline)"
    )
    record(
        {
            "checkpoint_rtt_p50_ms": round(p50, 2),
            "checkpoint_rtt_p99_ms": round(p99, 2),
            "http_rtt_p50_ms": round(bare_p50, 2),
        }
    )


def failover(
    plane: ControlPlane, api: k8s.ApiClient, faithful: KinesisEmulator, work: Path
) -> None:
    lease = 6.0
    scenario = Scenario(
        plane, api, faithful, namespace(api, "bench-failover"), "failover", work / "fo"
    )
    try:
        scenario.start(shards=4, replicas=2, lease_seconds=lease)
        wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2/2 balance")
        victim = sorted(scenario.owners())[0]
        leases = scenario.status()["leases"]
        shards = {s for s, lease in leases.items() if lease.get("owner") == victim}

        def moved_on() -> bool:
            report = scenario.report()
            return all(
                s in report.shard_owners and report.shard_owners[s][-1] != victim for s in shards
            )

        with scenario.producing(every=0.2, count=8):
            time.sleep(2)
            assert scenario.kubelet is not None
            killed = time.time()
            scenario.kubelet.kill(victim, signal.SIGKILL)
            wait_for(moved_on, 120, "the victim's shards to process elsewhere", poll=0.1)
        # The first record each victim shard processed after the kill, on its new owner.
        report = scenario.report()
        resumed = [report.first_processed(s, after=killed, besides=victim) for s in shards]
        seconds = max(at - killed for at in resumed if at is not None)
        bound = lease * 4 / 3
        print("failover, kill -9 of one of 2 workers (lease 6 s):")
        print(f"  lease + grace (the floor)  {bound:6.1f} s  (baseline)")
        print(f"  shards processing again    {seconds:6.1f} s  ({seconds / bound:.2f}x baseline)")
        record({"failover_seconds": round(seconds, 2)})
    finally:
        scenario.stop()


def operator_failover(
    plane: ControlPlane, api: k8s.ApiClient, faithful: KinesisEmulator, work: Path
) -> None:
    for how in ("kill", "upgrade"):
        ns = namespace(api, f"bench-operator-{how}")
        scenario = Scenario(plane, api, faithful, ns, f"op-{how}", work / f"op-{how}")
        try:
            start_with_two_operators(scenario)
            handover = hand_over(scenario, how)
            report = handover.report
            moved = sum(
                handover.owners_after.get(s) != o for s, o in handover.owners_before.items()
            )
            print(f"operator {'leader killed' if how == 'kill' else 'rolling upgrade'}:")
            if how == "kill":
                print(f"  leader Lease (the floor)   {LEADER_LEASE_SECONDS:6.1f} s  (baseline)")
            ratio = handover.seconds / LEADER_LEASE_SECONDS
            print(f"  every shard checkpointing  {handover.seconds:6.1f} s  ({ratio:.2f}x lease)")
            print(f"  longest pause of a shard   {handover.longest_pause:6.1f} s")
            print(
                f"  duplicates {report.duplicates}, lost {len(report.lost)}, shards moved {moved}"
            )
            prefix = "operator_failover" if how == "kill" else "operator_upgrade"
            record(
                {
                    f"{prefix}_seconds": round(handover.seconds, 2),
                    f"{prefix}_longest_pause_seconds": round(handover.longest_pause, 2),
                    f"{prefix}_duplicates": report.duplicates,
                    f"{prefix}_lost": len(report.lost),
                    "operator_leader_lease_seconds": LEADER_LEASE_SECONDS,
                }
            )
        finally:
            scenario.stop()


def control_plane_at_scale(
    plane: ControlPlane, api: k8s.ApiClient, fast: KinesisEmulator, work: Path
) -> None:
    shards, workers, window, lease = 1000, 50, 30.0, 15.0
    ns = namespace(api, "bench-scale")
    create_stream(fast.client, "scale", shards)
    scenario = Scenario(plane, api, fast, ns, "scale", work / "scale", name="scale")
    scenario.start_operator()
    manifest = scenario.manifest(replicas=workers, lease_seconds=lease, delay=0)
    scenario.consumers.create(manifest)
    core = k8s.CoreV1Api(api)
    wait_for(lambda: exists(core, ns, "scale-worker"), 60, "the worker ServiceAccount")
    tokens = worker_tokens(core, ns, "scale", "scale-worker", workers)
    assert scenario.operator is not None
    assert scenario.operator.server is not None
    base = f"{scenario.operator.url}/v1/namespaces/{ns}/streamconsumers/scale"
    calls = Calls()

    def status_size() -> int:
        obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "scale"
        )
        return len(json.dumps(obj))

    watch = StatusWatch(api, ns, "scale").start()

    async def run() -> tuple[float, float, int, int]:
        warmup = time.monotonic() + 3 * lease / 3 + 5
        total = warmup + window
        clients = [pod_client(index, timeout=30) for index in range(len(tokens))]
        tasks = [
            asyncio.create_task(simulate_worker(http, base, n, t, lease / 3, total, calls))
            for http, (n, t) in zip(clients, tokens.items(), strict=True)
        ]
        await asyncio.sleep(warmup - time.monotonic())
        writes_before = watch.count
        cpu_before, wall_before = cpu_seconds(scenario.operator.server.pid), time.monotonic()  # type: ignore[union-attr]
        calls_before = calls.checkpoints
        await asyncio.gather(*tasks)
        for http in clients:
            await http.aclose()
        wall = time.monotonic() - wall_before
        cpu = cpu_seconds(scenario.operator.server.pid) - cpu_before  # type: ignore[union-attr]
        return wall, cpu, watch.count - writes_before, calls.checkpoints - calls_before

    try:
        wall, cpu, writes, checkpoints = asyncio.run(run())
        size = status_size()
        owned = sum(scenario.owners().values())
        print(f"control plane, {shards} shards x {workers} simulated workers, {wall:.0f} s window:")
        print(
            f"  checkpoint calls           {checkpoints / wall:8.1f} /s"
            "  (baseline: what a write-through store would write)"
        )
        print(
            f"  status writes              {writes / wall:8.2f} /s"
            f"  ({writes / max(checkpoints, 1):.4f}x baseline)"
        )
        print(f"  status object              {size / 1024:8.1f} KiB  ({owned} shards owned)")
        print(f"  operator CPU               {cpu / wall:8.2f} cores")
        record(
            {
                "status_writes_per_second": round(writes / wall, 2),
                "status_object_kib": round(size / 1024, 1),
                "operator_cpu_cores": round(cpu / wall, 3),
                "checkpoint_calls_per_second": round(checkpoints / wall, 1),
            }
        )
    finally:
        watch.stop()
        scenario.stop()


def exists(core: k8s.CoreV1Api, ns: str, account: str) -> bool:
    try:
        core.read_namespaced_service_account(account, ns)
        return True
    except k8s.exceptions.ApiException:
        return False


class StatusWatch(BackgroundLoop):
    """Counts the writes that changed the status of an object (`name`), or of any in the
    namespace (None), through a real watch."""

    def __init__(self, api: k8s.ApiClient, ns: str, name: str | None) -> None:
        self._api, self._ns, self._name = api, ns, name
        self.count = 0
        self.gaps = 0  # times the watch failed: writes meanwhile went uncounted
        super().__init__()

    def _run(self) -> None:
        objects = k8s.CustomObjectsApi(self._api)
        last: dict[str, object] = {}
        only = {"field_selector": f"metadata.name={self._name}"} if self._name else {}
        while not self._stopping.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in stream.stream(  # type: ignore[no-untyped-call]
                    objects.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self._ns,
                    PLURAL,
                    timeout_seconds=2,
                    **only,
                ):
                    name = event["object"]["metadata"]["name"]
                    status = event["object"].get("status")
                    if event["type"] == "MODIFIED" and status != last.get(name):
                        self.count += 1
                    last[name] = status
                    if self._stopping.is_set():
                        break
            except k8s.exceptions.ApiException as error:
                # A loaded apiserver's watch cache lags ("Too large resource version",
                # 504): watch again; the writes in between are not counted.
                self.gaps += 1
                print(f"  (status watch: {error.status} {error.reason}; watching again)")


def main() -> None:
    with contextlib.ExitStack() as cleanup:
        work, plane = cleanup.enter_context(scratch_plane("streamconsumer-bench-"))
        fast = cleanup.enter_context(
            KinesisEmulator.start("kinesalite", work / "kinesalite", operation_delay_ms=50)
        )
        faithful = cleanup.enter_context(
            KinesisEmulator.start("kinesis-local", work / "kinesis-local")
        )
        run(plane, fast, faithful, work)


def run(plane: ControlPlane, fast: KinesisEmulator, faithful: KinesisEmulator, work: Path) -> None:
    api = with_the_crd(plane)
    scenario = worker_throughput(plane, api, fast, work)
    try:
        checkpoint_rtt(scenario)
    finally:
        scenario.stop()
    failover(plane, api, faithful, work)
    operator_failover(plane, api, faithful, work)
    control_plane_at_scale(plane, api, fast, work)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    main()
