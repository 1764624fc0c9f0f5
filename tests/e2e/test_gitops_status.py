"""Flux's and Argo CD's verdicts on the live object, in every state a consumer passes
through (issue 42): kstatus itself (built from sigs.k8s.io/cli-utils) and the Argo CD
health check in docs/argocd, each fed the StreamConsumer as the real apiserver returns it.

One consumer goes through them in turn: ready, a new spec the operator has not applied,
its workers' rollout, scaled to zero, paused, a spec the pod policy refuses, a poison
record blocking a shard, deleting."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.names import worker_deployment
from testbed.argocd import health
from testbed.scenario import Scenario
from testbed.waiting import wait_for

POISON = "r-9"  # the tenth record produced
HOLD = "tests.streamconsumer.io/hold"  # a finalizer of the test's: deleting stays visible
BLOCK = {"retries": 1, "initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.1, "then": "block"}


class Verdicts:
    def __init__(self, scenario: Scenario, kstatus: Path) -> None:
        self.scenario, self.kstatus = scenario, kstatus

    def live(self) -> dict[str, Any]:
        return self.scenario.consumers.get(self.scenario.name)

    def of(self, body: dict[str, Any]) -> tuple[str, str]:
        """(kstatus' status, Argo CD's health) of one object as read."""
        out = subprocess.run(
            [str(self.kstatus)], input=json.dumps(body), capture_output=True, text=True, check=True
        )
        return json.loads(out.stdout)["status"], str(health(body)["status"])

    def now(self) -> tuple[str, str]:
        return self.of(self.live())

    def wait(self, expected: tuple[str, str], reason: str, seconds: float = 60) -> None:
        """Until the live object reads `expected` with `reason` on Ready or Stalled."""

        def reached() -> bool:
            body = self.live()
            conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions", [])}
            said = {c.get("reason") for t, c in conditions.items() if t in ("Ready", "Stalled")}
            return reason in said and self.of(body) == expected

        wait_for(reached, seconds, f"{expected} with {reason}", details=self.details)

    def details(self) -> str:
        body = self.live()
        return f"verdicts {self.of(body)}; status {json.dumps(body.get('status'))[:1500]}"


def rolled_out(apps: k8s.AppsV1Api, scenario: Scenario) -> bool:
    """`kubectl rollout status`'s rules, read from the Deployment now (not the product's
    own reading of them, which is under test)."""
    read = apps.read_namespaced_deployment(worker_deployment(scenario.name), scenario.namespace)
    found = scenario.api_client.sanitize_for_serialization(read)  # type: ignore[no-untyped-call]
    status, desired = found.get("status") or {}, found["spec"].get("replicas", 1)
    updated = status.get("updatedReplicas", 0)
    return bool(
        status.get("observedGeneration", 0) >= found["metadata"]["generation"]
        and updated >= desired
        and status.get("replicas", 0) <= updated
        and status.get("availableReplicas", 0) >= updated
    )


def rolls_out_unseen(verdicts: Verdicts, apps: k8s.AppsV1Api) -> None:
    """A new spec's rollout: never Current (nor Healthy) while the Deployment still rolls
    out, then Current for that generation. The object is read first: a rollout found
    unfinished after it was unfinished then. Both are read before kstatus runs (a
    process: on a loaded machine a short rollout ended while it ran)."""
    scenario, seen_rolling, deadline = verdicts.scenario, 0, time.monotonic() + 90
    while time.monotonic() < deadline:
        body = verdicts.live()
        rolling = not rolled_out(apps, scenario)
        said = verdicts.of(body)
        if rolling:
            seen_rolling += 1
            assert said == ("InProgress", "Progressing"), verdicts.details()
        elif said == ("Current", "Healthy"):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"never Current after the rollout: {verdicts.details()}")
    assert seen_rolling > 0, "the rollout was over before the first look"
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]


def env_with(scenario: Scenario, name: str, value: str) -> dict[str, Any]:
    env = scenario.consumers.get(scenario.name)["spec"]["processor"]["env"]
    return {"spec": {"processor": {"env": [*env, {"name": name, "value": value}]}}}


@pytest.mark.timeout(420)
def test_flux_and_argocd_see_what_really_runs(scenario: Scenario, kstatus: Path) -> None:
    scenario.start(shards=2, replicas=1, processor_env={"RECORD_POISON": POISON}, on_failure=BLOCK)
    verdicts = Verdicts(scenario, kstatus)
    apps = k8s.AppsV1Api(scenario.api_client)
    scenario.produce(5)
    wait_for(scenario.all_processed, 60, "the first records")
    verdicts.wait(("Current", "Healthy"), "AllShardsOwned")

    # A new spec the operator has not applied yet (frozen): generation 2, observed 1.
    assert scenario.operator is not None
    scenario.operator.pause()
    try:
        changed = scenario.consumers.patch(scenario.name, env_with(scenario, "ROLLOUT", "1"))
        assert changed["metadata"]["generation"] > changed["status"]["observedGeneration"]
        assert verdicts.now() == ("InProgress", "Progressing")
    finally:
        scenario.operator.resume()

    # New pods take 3 s to be Ready, as containers do on a node: the local kubelet's are
    # at once, and a rollout then ended before any reading could see it under way.
    assert scenario.kubelet is not None
    scenario.kubelet.ready_after_seconds = 3.0
    rolls_out_unseen(verdicts, apps)

    scenario.consumers.patch(scenario.name, {"spec": {"replicas": 0}})
    verdicts.wait(("Current", "Healthy"), "ScaledToZero")

    scenario.consumers.patch(scenario.name, {"spec": {"replicas": 1, "paused": True}})
    verdicts.wait(("Current", "Healthy"), "Paused")
    # A rollout while no shard moves (no hand-off to show it in progress by chance).
    scenario.consumers.patch(scenario.name, env_with(scenario, "PAUSED_ROLLOUT", "1"))
    rolls_out_unseen(verdicts, apps)

    refused = {"spec": {"paused": False, "pod": {"unrestricted": True}}}
    scenario.consumers.patch(scenario.name, refused)
    verdicts.wait(("Failed", "Degraded"), "ChildrenNotApplied")
    body = verdicts.live()
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]

    scenario.consumers.patch(scenario.name, {"spec": {"pod": {"unrestricted": False}}})
    verdicts.wait(("Current", "Healthy"), "AllShardsOwned", seconds=90)

    scenario.produce(10)  # the poison among them: its shard blocks
    verdicts.wait(("Failed", "Degraded"), "ShardBlocked", seconds=90)

    held = [*(verdicts.live()["metadata"].get("finalizers") or []), HOLD]  # kopf's kept
    scenario.consumers.patch(scenario.name, {"metadata": {"finalizers": held}})
    scenario.consumers.delete(scenario.name)
    try:
        wait_for(lambda: verdicts.now() == ("Terminating", "Progressing"), 30, "deleting")
    finally:
        left = [f for f in verdicts.live()["metadata"].get("finalizers") or [] if f != HOLD]
        scenario.consumers.patch(scenario.name, {"metadata": {"finalizers": left}})
