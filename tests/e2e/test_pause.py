"""`streamconsumer pause|resume` on the real parts (issue 13.4): a pause hands every shard
off at its position and nothing is processed until the resume, which then loses nothing
and repeats nothing."""

from __future__ import annotations

import subprocess
import sys
import time

from streamconsumer.models.resource import REQUESTED_BY
from testbed.scenario import Scenario
from testbed.waiting import wait_for

ADMIN = "admin"  # the test control plane's user (testbed/pki.py)


def cli(scenario: Scenario, verb: str) -> str:
    where = ["-n", scenario.namespace, "--kubeconfig", str(scenario.plane.kubeconfig)]
    done = subprocess.run(
        [sys.executable, "-m", "streamconsumer.cli", verb, scenario.name, *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def ready_reason(scenario: Scenario) -> str | None:
    conditions = scenario.status().get("conditions") or []
    return next((c["reason"] for c in conditions if c["type"] == "Ready"), None)


def audit_trail(scenario: Scenario) -> str:
    body = scenario.consumers.get(scenario.name)
    assert scenario.operator is not None
    assert scenario.operator.server is not None
    return (
        f"pausedBy: {(body.get('status') or {}).get('pausedBy')!r}\n"
        f"annotations: {body['metadata'].get('annotations')}\n"
        f"events: {scenario.events()}\n"
        f"operator log:\n{scenario.operator.server.log_tail(60)}"
    )


def test_pause_hands_everything_off_and_resume_carries_on(scenario: Scenario) -> None:
    scenario.start(shards=4, replicas=2)
    scenario.produce(100)
    wait_for(scenario.all_processed, 60, "records before the pause")

    assert "paused" in cli(scenario, "pause")
    wait_for(lambda: ready_reason(scenario) == "Paused", 30, "every shard let go")
    # Who asked (docs/security.md#audit): the CLI's user, in status and in an Event; the
    # annotation that named them is gone once recorded.
    wait_for(
        lambda: scenario.status().get("pausedBy") == ADMIN,
        30,
        "who paused, in status",
        details=lambda: audit_trail(scenario),
    )
    assert ("Paused", f"paused by {ADMIN}: workers hand their shards off") in scenario.events()
    annotations = scenario.consumers.get(scenario.name)["metadata"].get("annotations") or {}
    assert REQUESTED_BY not in annotations
    leases = scenario.status()["leases"]
    assert all(not lease.get("owner") for lease in leases.values()), leases
    processed = scenario.report().processed
    scenario.produce(100)
    time.sleep(4)  # several heartbeats and reads: nothing moves while paused
    assert scenario.report().processed == processed, "processed while paused"

    assert "resumed" in cli(scenario, "resume")
    wait_for(lambda: ("Resumed", f"resumed by {ADMIN}") in scenario.events(), 30, "who resumed")
    wait_for(scenario.all_processed, 60, "records after the resume")
    scenario.delivered(duplicates_at_most=0)
