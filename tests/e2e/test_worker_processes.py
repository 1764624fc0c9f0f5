"""processor.processes on the real parts (issue 29): a real operator, worker pods each
running a supervisor over two real worker processes, kinesis-local. Each process is a
worker of its own (`<pod>#<index>`) holding shards of its own; a scale-up and a
scale-down move shards between processes of different pods by hand-offs (the scale-down's
SIGTERM goes to the supervisor alone, as a container runtime sends it); the pod's port
serves every process' metrics. Nothing lost, order kept, no record processed twice."""

from __future__ import annotations

from e2e.test_metrics import scrape, total
from streamconsumer.models.api import worker_pod, worker_process
from streamconsumer.worker.process_metrics import PROCESS_LABEL
from testbed.processes import free_port
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def test_a_pods_processes_are_workers_of_their_own_under_every_guarantee(
    scenario: Scenario,
) -> None:
    block = free_port(3)  # the first pod's metrics port, then its processes'
    with_metrics: list[str] = []

    def pod_env(pod: str) -> dict[str, str]:
        with_metrics[:] = with_metrics or [pod]
        return {"STREAMCONSUMER_METRICS_PORT": str(block if pod == with_metrics[0] else 0)}

    scenario.start(shards=4, replicas=1, processes=2, pod_env=pod_env)
    kubelet = scenario.kubelet
    assert kubelet is not None
    wait_for(lambda: bool(kubelet.running()), 30, "the first pod")
    first = kubelet.running()[0]
    wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "2 shards per process")
    assert set(scenario.owners()) == {f"{first}#0", f"{first}#1"}
    scenario.produce(200)
    wait_for(scenario.all_processed, 90, "every record, in the first pod")

    scenario.scale(2)
    wait_for(lambda: sorted(scenario.owners().values()) == [1, 1, 1, 1], 60, "a shard each")
    second = next(pod for pod in kubelet.running() if pod != first)
    assert {worker_pod(owner) for owner in scenario.owners()} == {first, second}
    scenario.produce(200)
    wait_for(scenario.all_processed, 90, "every record, over two pods")

    with scenario.producing():  # records arrive while the shards move
        scenario.scale(1, going=[second])  # its supervisor alone gets SIGTERM
        wait_for(lambda: len(kubelet.running()) == 1, 60, "one pod")
        wait_for(lambda: sorted(scenario.owners().values()) == [2, 2], 60, "back to one pod")
    # Its processes handed their shards off: none went silent until its lease expired.
    assert [m for r, m in scenario.events() if r == "LeaseExpired"] == []
    assert kubelet.running() == [first]
    scenario.produce(200)
    wait_for(scenario.all_processed, 90, "every record after the scale-down")

    report = scenario.delivered()  # planned moves hand off: no record is processed twice
    assert set(report.by_worker) == {f"{first}#0", f"{first}#1", f"{second}#0", f"{second}#1"}

    assert with_metrics == [first]
    metrics = scrape(f"http://127.0.0.1:{block}/metrics")
    held = {
        (str(worker_process(lease["owner"])[1]), shard)
        for shard, lease in scenario.status()["leases"].items()
        if lease.get("state") == "Active"
    }
    served = {
        (dict(labels)[PROCESS_LABEL], dict(labels)["shard"])
        for (name, labels) in metrics
        if name == "streamconsumer_worker_records_total"
    }
    assert served == held  # each process' series, labelled with it, for the shards it holds
    assert total(metrics, "streamconsumer_worker_records_total") > 0
