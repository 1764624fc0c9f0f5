"""Lease groups on the real apiserver (controller/lease_group_store.py): a table past the
threshold written by the production StatusWriter as ConfigMaps owned by its consumer,
read back whole by the operator, the CLI and an export; fenced as before; a group that
is not ours, or gone, said in words."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.lease_group_store import KubeLeaseGroups, read_consumer
from streamconsumer.controller.lease_groups import GroupedStatusApi, Layout, Writer
from streamconsumer.controller.status import KubeStatusApi, StaleState, StatusInvalid, StatusWriter
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers

from .test_cli import checkpoints, cli
from .test_control_plane import sample_consumer

LAYOUT = Layout(inline_max_shards=2, groups=3)


def leases(owner: str, checkpoint: int, shards: int = 6) -> dict[str, object]:
    return {
        "leases": {
            f"shardId-{n:012d}": {
                "owner": owner,
                "epoch": 1,
                "checkpoint": str(checkpoint + n),
                "state": "Active",
            }
            for n in range(shards)
        }
    }


def grouped(api_client: k8s.ApiClient, namespace: str, name: str, uid: str) -> GroupedStatusApi:
    return GroupedStatusApi(
        KubeStatusApi(api_client, namespace, name),
        KubeLeaseGroups(api_client, namespace, name, uid),
        name,
        LAYOUT,
    )


def test_a_grouped_table_is_read_whole_by_the_operator_the_cli_and_an_export(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("wide"))
    uid = consumers.get("wide")["metadata"]["uid"]
    api = grouped(api_client, namespace, "wide", uid)
    active = StatusWriter(api, namespace, "wide", holder="active")
    stale = StatusWriter(grouped(api_client, namespace, "wide", uid), namespace, "wide", "stale")
    body = api.get()
    active.adopt(body)
    stale.adopt(body)
    active.write(leases("a", 10))
    active.write(leases("a", 20))

    stored = consumers.get("wide")["status"]
    assert len(stored["leaseGroups"]) == 3
    assert list(stored["leases"]) == ["in-lease-groups"]
    core = k8s.CoreV1Api(api_client)
    names = {ref["name"] for ref in stored["leaseGroups"]}
    groups = {}
    for config_map in core.list_namespaced_config_map(namespace).items:
        meta = config_map.metadata
        assert meta is not None
        if (meta.name or "").startswith("wide-leases-"):
            groups[meta.name] = [(o.kind, o.uid) for o in meta.owner_references or []]
    assert set(groups) == names, "the groups the first write replaced are deleted"
    assert all(owners == [("StreamConsumer", uid)] for owners in groups.values())

    table = read_consumer(api_client, namespace, "wide")["status"]["leases"]
    assert {shard: lease["checkpoint"] for shard, lease in table.items()} == {
        f"shardId-{n:012d}": str(20 + n) for n in range(6)
    }
    with pytest.raises(StaleState):  # the term fence, as with the table inline
        stale.write(leases("b", 5))

    shown = cli(control_plane, "wide", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "shardId-000000000005" in shown.stdout
    assert "in-lease-groups" not in shown.stdout
    exported = checkpoints(control_plane, "export", "wide", "-n", namespace)
    assert exported.returncode == 0, exported.stderr
    assert sorted(json.loads(exported.stdout)["status"]["leases"]) == sorted(table)


def test_a_group_gone_or_not_ours_is_said_and_old_orphans_are_swept(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("lost"))
    uid = consumers.get("lost")["metadata"]["uid"]
    store = KubeLeaseGroups(api_client, namespace, "lost", uid)
    store.create("lost-leases-9-orphan", "{}", Writer(0, 1, "a-process-long-gone"))
    api = grouped(api_client, namespace, "lost", uid)
    for holder in ("one", "two"):  # terms 0 and 1
        writer = StatusWriter(api, namespace, "lost", holder=holder)
        writer.adopt(api.get())
        writer.write(leases("a", 10))
        left = "lost-leases-9-orphan" in {g.name for g in store.listed()}
        # Term 0's other process may still write it; term 1's first write sweeps it.
        assert left == (holder == "one")

    core = k8s.CoreV1Api(api_client)
    first = consumers.get("lost")["status"]["leaseGroups"][0]["name"]
    mine = core.read_namespaced_config_map(first, namespace)
    core.delete_namespaced_config_map(first, namespace)
    foreign = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=first), data=mine.data)
    core.create_namespaced_config_map(namespace, foreign)  # same content, not ours
    with pytest.raises(StatusInvalid, match=f"ConfigMap {first} is not a lease group of lost"):
        api.get()

    core.delete_namespaced_config_map(first, namespace)
    with pytest.raises(StatusInvalid, match="is missing: the checkpoints of its shards"):
        api.get()
    shown = cli(control_plane, "lost", "-n", namespace)
    assert shown.returncode == 1
    assert f"ConfigMap {first}" in shown.stderr
    assert "Traceback" not in shown.stderr
