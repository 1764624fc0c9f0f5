"""install → upgrade from the previous chart, on a real apiserver and controller manager
of their own (a cluster where only the previous chart was installed).

Two previous charts (docs/upgrades.md): the previous release, tests/releases/chart.tgz,
and 0.1.0 as of testbed.charts.PREVIOUS_CHART_COMMIT, the last that shipped the CRD in its
crds/ folder, taken from the repository's history with `git archive`.

Shown: the upgrade as docs/upgrades.md tells it (from crds/, Helm refuses to take over
the CRD it did not create; adopted with the documented label and annotations, it
succeeds); the CRD is
upgraded (a field the new models added is accepted by strict field validation, refused
before); a StreamConsumer made under the previous chart keeps its uid, spec and status;
the operator Deployment rolls to the new template (a new ReplicaSet). Without a kubelet the
new pods never run: tests/realnode/test_chart_upgrade.py shows the rollout finish with
records flowing."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.charts import (
    CHART,
    CRD,
    PREVIOUS_CHART_VERSION,
    REPO,
    UPGRADE_VALUES_FLAG,
    adopt_crd,
    documented,
    previous_chart,
)
from testbed.controlplane import ControlPlane
from testbed.releases import PREVIOUS_CHART, verified
from testbed.waiting import wait_for

RELEASE, RELEASE_NAMESPACE, TEAM = "streamconsumer", "streamconsumer-system", "team-a"


@pytest.fixture
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own: this test installs and upgrades the CRD itself."""
    started = ControlPlane.start(tmp_path_factory.mktemp("upgrade-plane"))
    try:
        yield started
    finally:
        started.stop()


def helm_in(plane: ControlPlane, helm: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.kubeconfig),
        "HELM_CONFIG_HOME": str(plane.workdir / "helm-config"),
        "HELM_CACHE_HOME": str(plane.workdir / "helm-cache"),
        "HELM_DATA_HOME": str(plane.workdir / "helm-data"),
    }
    return subprocess.run(
        [str(helm), *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def get(plane: ControlPlane, *args: str) -> Any:
    got = plane.kubectl("get", *args, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def consumer(name: str, **processor: Any) -> dict[str, Any]:
    return {
        "apiVersion": "streamconsumer.io/v1alpha1",
        "kind": "StreamConsumer",
        "metadata": {"name": name, "namespace": TEAM},
        "spec": {
            "source": {"kinesis": {"streamName": "clicks", "region": "eu-west-1"}},
            "processor": {
                "image": "example/clicks:1",
                "entrypoint": "clicks:Processor",
                **processor,
            },
            "replicas": 2,
        },
    }


def apply_strictly(
    plane: ControlPlane, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Server-side apply with strict field validation: an unknown field is an error, not
    silently pruned."""
    return plane.kubectl(
        "apply", "--server-side", "--validate=strict", "-f", "-", input=json.dumps(manifest)
    )


def replica_sets(plane: ControlPlane) -> dict[str, int]:
    """The operator Deployment's ReplicaSets: name → desired replicas."""
    listed = get(plane, "replicasets", "-n", RELEASE_NAMESPACE)
    return {
        rs["metadata"]["name"]: rs["spec"]["replicas"]
        for rs in listed["items"]
        if any(
            o["name"] == f"{RELEASE}-operator" for o in rs["metadata"].get("ownerReferences", [])
        )
    }


@pytest.mark.parametrize("previous", ["release", "crds-folder"])
def test_the_previous_chart_upgrades_in_place(
    plane: ControlPlane, helm: Path, tmp_path: Path, previous: str
) -> None:
    """`release`: the previous release (tests/releases/chart.tgz, as docs/upgrades.md's
    version policy defines it); `crds-folder`: 0.1.0 from git, its CRD in crds/, which
    Helm must be told to adopt."""
    if previous == "release":
        chart = verified(PREVIOUS_CHART)
        unpacked = tmp_path / "release"
        unpacked.mkdir()
        with tarfile.open(chart) as tar:
            tar.extractall(unpacked, filter="data")
        version = yaml.safe_load((unpacked / "streamconsumer" / "Chart.yaml").read_text())
    else:
        chart = previous_chart(tmp_path / "previous")
        assert (chart / "crds").is_dir(), "0.1.0 shipped its CRD in crds/"
        version = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert version["version"] == PREVIOUS_CHART_VERSION
    current = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    assert current != PREVIOUS_CHART_VERSION, "a chart changed since has a new version"
    adopt = previous == "crds-folder"
    previous_chart_path = chart

    installed = helm_in(
        plane,
        helm,
        "install",
        RELEASE,
        previous_chart_path,
        "-n",
        RELEASE_NAMESPACE,
        "--create-namespace",
    )
    assert installed.returncode == 0, installed.stderr
    wait_for(
        lambda: plane.kubectl("get", "streamconsumers", "-A").returncode == 0,
        60,
        "the previous CRD served",
    )
    assert plane.kubectl("create", "namespace", TEAM).returncode == 0
    made = apply_strictly(plane, consumer("clicks"))
    assert made.returncode == 0, made.stderr
    status = {
        "leases": {
            "shardId-000000000000": {
                "owner": "clicks-workers-5d9c-abcde",
                "epoch": 7,
                "checkpoint": "49590338271490256608559692538361571095921575989136588898",
                "state": "Active",
            }
        }
    }
    patched = plane.kubectl(
        "patch", "streamconsumer", "clicks", "-n", TEAM, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    before = get(plane, "streamconsumer", "clicks", "-n", TEAM)
    # A field of the new models: the previous CRD does not have it.
    named = consumer("named", serviceAccountName="clicks-reader")
    refused = apply_strictly(plane, named)
    assert refused.returncode != 0
    assert ".spec.processor.serviceAccountName: field not declared in schema" in refused.stderr, (
        refused.stderr
    )
    deployment = get(plane, "deployment", f"{RELEASE}-operator", "-n", RELEASE_NAMESPACE)
    generation = deployment["metadata"]["generation"]
    wait_for(lambda: len(replica_sets(plane)) == 1, 60, "the previous operator's ReplicaSet")
    first = set(replica_sets(plane))

    docs = (REPO / "docs" / "upgrades.md").read_text()
    assert "helm upgrade streamconsumer charts/streamconsumer --namespace " in docs
    assert UPGRADE_VALUES_FLAG in docs
    upgrade = ("upgrade", RELEASE, CHART, "-n", RELEASE_NAMESPACE, UPGRADE_VALUES_FLAG)
    if adopt:
        # Helm did not create the CRD through a template, so it will not take it over.
        refused_upgrade = helm_in(plane, helm, *upgrade)
        assert refused_upgrade.returncode != 0
        assert "invalid ownership metadata" in refused_upgrade.stderr, refused_upgrade.stderr
        # ...until it is adopted as docs/upgrades.md says.
        for command in adopt_crd(RELEASE, RELEASE_NAMESPACE):
            assert documented(command), f"docs/upgrades.md no longer says: kubectl {command}"
            done = plane.kubectl(*command)
            assert done.returncode == 0, done.stderr
    upgraded = helm_in(plane, helm, *upgrade)
    assert upgraded.returncode == 0, upgraded.stderr

    # The CRD is the new one: the new field is accepted, and kept.
    wait_for(lambda: apply_strictly(plane, named).returncode == 0, 60, "the new field accepted")
    kept = get(plane, "streamconsumer", "named", "-n", TEAM)
    assert kept["spec"]["processor"]["serviceAccountName"] == "clicks-reader"
    crd = get(plane, "crd", CRD)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The StreamConsumer made under the previous chart is the same object, spec and status.
    after = get(plane, "streamconsumer", "clicks", "-n", TEAM)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"] == before["spec"]
    assert after["status"]["leases"] == before["status"]["leases"]
    # The operator rolls: a new template, a new ReplicaSet beside the previous one.
    deployment = get(plane, "deployment", f"{RELEASE}-operator", "-n", RELEASE_NAMESPACE)
    assert deployment["metadata"]["generation"] > generation
    wait_for(lambda: set(replica_sets(plane)) > first, 60, "a new ReplicaSet for the new template")
    history = helm_in(plane, helm, "history", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "json")
    revisions = json.loads(history.stdout)
    assert [(r["revision"], r["status"]) for r in revisions][-1] == (2, "deployed")
    assert revisions[-1]["chart"] == f"streamconsumer-{current}"

    # Uninstalling keeps the CRD, and with it every StreamConsumer.
    removed = helm_in(plane, helm, "uninstall", RELEASE, "-n", RELEASE_NAMESPACE)
    assert removed.returncode == 0, removed.stderr
    assert (
        get(plane, "streamconsumer", "clicks", "-n", TEAM)["metadata"]["uid"]
        == (before["metadata"]["uid"])
    )
