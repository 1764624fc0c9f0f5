"""Workers that speak the worker API and nothing else: no stream read, no processor. They
load an operator as real workers do (a heartbeat, then a checkpoint of each shard held,
every cycle), so its own cost can be measured at a scale no machine runs pods for."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s

from streamconsumer.controller.names import label_selector
from streamconsumer.controller.worker_api.auth import AUDIENCE
from testbed.waiting import wait_for


def worker_tokens(
    core: k8s.CoreV1Api, ns: str, consumer: str, account: str, count: int
) -> dict[str, str]:
    """`count` pods of the consumer's Deployment (its spec.replicas; none runs, no
    kubelet is needed) and a token bound to each, as the kubelet would project into a
    real worker: the worker API serves a pod of its Deployment alone."""

    def pods() -> list[k8s.V1Pod]:
        return list(core.list_namespaced_pod(ns, label_selector=label_selector(consumer)).items)

    wait_for(lambda: len(pods()) >= count, 120, f"{count} pods of {consumer}'s workers")
    tokens = {}
    for pod in pods()[:count]:
        assert pod.metadata is not None
        assert pod.metadata.name is not None
        request = k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(
                audiences=[AUDIENCE],
                bound_object_ref=k8s.V1BoundObjectReference(
                    kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
                ),
            )
        )
        issued = core.create_namespaced_service_account_token(account, ns, request)
        assert issued.status is not None
        assert issued.status.token is not None
        tokens[pod.metadata.name] = issued.status.token
    return tokens


@dataclass
class Calls:
    checkpoints: int = 0
    heartbeats: int = 0
    refused: int = 0  # heartbeats answered other than 200
    answers: Counter[int] = field(default_factory=Counter)  # every call's HTTP status (599: none)
    # Why calls were not served: the answer's message, its names and numbers left out.
    reasons: Counter[str] = field(default_factory=Counter)
    failed_checkpoints: int = 0  # answered other than 200, or not at all
    slowest: float = 0.0  # seconds, the slowest call answered or given up on


def pod_client(index: int, timeout: float = 60) -> httpx.AsyncClient:
    """A client whose calls come from a loopback address of its own (127.0.x.y), as each
    pod's come from its own IP: the operator budgets TokenReviews per source address,
    and hundreds of workers behind one address would be one noisy neighbour instead."""
    if not 0 <= index < 250 * 250:
        raise ValueError(f"no loopback address for worker {index}")
    address = f"127.0.{1 + index // 250}.{1 + index % 250}"
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(timeout=timeout, transport=transport)


async def _post(http: httpx.AsyncClient, url: str, body: Any, token: str, calls: Calls) -> Any:
    """The call's answer; 599 when none came (a worker retries the next cycle)."""
    started = time.monotonic()
    try:
        answer = await http.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError:
        answer = httpx.Response(599)
    calls.slowest = max(calls.slowest, time.monotonic() - started)
    calls.answers[answer.status_code] += 1
    if answer.status_code not in (200, 599):
        try:
            said = str(answer.json().get("message", ""))
        except ValueError:  # not our JSON (a proxy's page, an empty body)
            said = answer.text
        calls.reasons[
            f"{answer.status_code} " + re.sub(r"[\w.-]*[/\d][\w./-]*", "_", said)[:70]
        ] += 1
    return answer


async def simulate_worker(
    http: httpx.AsyncClient,
    base: str,
    name: str,
    token: str,
    cycle_seconds: float,
    deadline: float,
    calls: Calls,
) -> None:
    """Heartbeats to the consumer at `base` (its worker API URL) every `cycle_seconds`
    until `deadline`, taking what it is granted and handing off what it is asked to,
    and checkpoints each shard it holds at each cycle."""
    held: dict[str, int] = {}
    sequence = 0
    while time.monotonic() < deadline:
        beat = {"worker": name, "held": [{"shardId": s, "epoch": e} for s, e in held.items()]}
        answer = await _post(http, f"{base}/heartbeat", beat, token, calls)
        calls.heartbeats += 1
        if answer.status_code != 200:  # not loaded yet, or overloaded: as a worker, later
            calls.refused += 1
            await asyncio.sleep(cycle_seconds)
            continue
        response = answer.json()
        for assignment in response["assignments"]:
            held[assignment["shardId"]] = assignment["epoch"]
        for revocation in response["revocations"]:
            held.pop(revocation["shardId"], None)
            if revocation["reason"] == "handoff":  # let go, at this epoch
                release = {
                    "worker": name,
                    "shardId": revocation["shardId"],
                    "epoch": revocation["epoch"],
                    "release": True,
                }
                await _post(http, f"{base}/checkpoint", release, token, calls)
        sequence += 1
        for shard, epoch in list(held.items()):
            body = {
                "worker": name,
                "shardId": shard,
                "epoch": epoch,
                "sequenceNumber": str(10**55 + sequence),  # Kinesis' 56 digits
            }
            if (await _post(http, f"{base}/checkpoint", body, token, calls)).status_code == 200:
                calls.checkpoints += 1
            else:
                calls.failed_checkpoints += 1
        await asyncio.sleep(cycle_seconds)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """The process' peak resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")
