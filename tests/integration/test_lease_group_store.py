"""Lease groups on the real apiserver (controller/leases/lease_group_store.py): a table past the
threshold written by the production StatusWriter as ConfigMaps owned by its consumer,
read back whole by the operator, the CLI and an export; fenced as before; a group that
is not ours, or gone, said in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.leases import lease_group_store
from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.lease_group_store import (
    CONSUMER_UID_LABEL,
    LEASE_GROUP_APP,
    KubeLeaseGroups,
    read_consumer,
)
from streamconsumer.controller.leases.lease_groups import (
    GroupedStatusApi,
    Layout,
    Writer,
    names_of,
    read_stored,
    refs_of,
)
from streamconsumer.controller.leases.status import StaleState, StatusInvalid, StatusWriter
from streamconsumer.models.resource import CONSUMER_LABEL, NAME_LABEL
from testbed import releases
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers

from .test_cli import checkpoints, cli
from .test_control_plane import sample_consumer

LAYOUT = Layout(inline_max_shards=2, groups=3, log=False)  # lease groups
LOG = Layout(inline_max_shards=2, groups=3, log_group_shards=2)


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


def created(api_client: k8s.ApiClient, namespace: str, name: str) -> tuple[StreamConsumers, str]:
    """A new StreamConsumer `name`, and its uid."""
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer(name))
    return consumers, consumers.get(name)["metadata"]["uid"]


def grouped(
    api_client: k8s.ApiClient, namespace: str, name: str, uid: str, layout: Layout = LAYOUT
) -> GroupedStatusApi:
    """As the operator makes it (controller/consumer/consumers.py)."""
    status = KubeStatusApi(api_client, namespace, name)
    store = KubeLeaseGroups(api_client, namespace, name, uid)
    return GroupedStatusApi(status, store, name, layout)


def test_a_grouped_table_is_read_whole_by_the_operator_the_cli_and_an_export(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers, uid = created(api_client, namespace, "wide")
    api = grouped(api_client, namespace, "wide", uid)
    active = StatusWriter(api, namespace, "wide", holder="active")
    stale = StatusWriter(grouped(api_client, namespace, "wide", uid), namespace, "wide", "stale")
    body = api.get()
    active.adopt(body)
    stale.adopt(body)
    active.write(leases("a", 10))
    active.write(leases("a", 20))

    stored = consumers.get("wide")["status"]
    refs = refs_of(stored) or []
    assert [ref.name.rsplit("-", 2)[-2] for ref in refs] == ["0", "1", "2"]
    assert sum(ref.leases for ref in refs) == 6
    groups = {}
    for config_map in k8s.CoreV1Api(api_client).list_namespaced_config_map(namespace).items:
        meta = config_map.metadata
        assert meta is not None
        if (meta.name or "").startswith("wide-leases-"):
            groups[meta.name] = (meta.labels or {}).get(CONSUMER_UID_LABEL)
    assert set(groups) == {ref.name for ref in refs}, "the groups replaced are deleted"
    assert set(groups.values()) == {uid}

    table = read_consumer(api_client, namespace, "wide")["status"]["leases"]
    assert {shard: lease["checkpoint"] for shard, lease in table.items()} == {
        f"shardId-{n:012d}": str(20 + n) for n in range(6)
    }
    with pytest.raises(StaleState):  # the term fence, as with the table inline
        stale.write(leases("b", 5))

    shown = cli(control_plane, "wide", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "shardId-000000000005" in shown.stdout
    assert "InLeaseGroups" not in shown.stdout
    exported = checkpoints(control_plane, "export", "wide", "-n", namespace)
    assert exported.returncode == 0, exported.stderr
    assert sorted(json.loads(exported.stdout)["status"]["leases"]) == sorted(table)


def test_a_group_gone_or_not_ours_is_said_and_old_orphans_are_swept(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers, uid = created(api_client, namespace, "lost")
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
    first = (refs_of(consumers.get("lost")["status"]) or [])[0].name
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


@pytest.mark.parametrize(("layout", "state"), [(LAYOUT, "InLeaseGroups"), (LOG, "InLeaseLog")])
def test_a_rollback_to_the_previous_release_refuses_a_grouped_table(
    control_plane: ControlPlane,
    api_client: k8s.ApiClient,
    namespace: str,
    tmp_path: Path,
    layout: Layout,
    state: str,
) -> None:
    """Found by review: a rollback applies the previous CRD, which prunes the fields it
    does not know from every object read. References kept in a field of this release's
    came back pruned (the previous operator then read an empty table, and this release's
    next write under that CRD lost them for good). The entries naming the groups use
    only fields the previous CRD knows, and a state it refuses: it keeps them, its
    operator refuses the table, and this release's write of a changed group under it is
    refused by the apiserver, the table left whole."""
    name = f"back-{state.lower()}"
    consumers, uid = created(api_client, namespace, name)
    api = grouped(api_client, namespace, name, uid, layout)
    writer = StatusWriter(api, namespace, name, holder="new")
    writer.adopt(api.get())
    writer.write(leases("a", 10))
    entries = consumers.get(name)["status"]["leases"]
    assert {entry["state"] for entry in entries.values()} == {state}
    try:
        releases.apply_crd(control_plane, releases.PREVIOUS_CRD)
        as_read = consumers.get(name)["status"]
        assert as_read["leases"] == entries, "the previous CRD keeps what names the table"
        loaded = releases.previous_loads(as_read, tmp_path / "previous")
        assert loaded.returncode == 1, loaded.stdout
        assert state in loaded.stderr
        with pytest.raises(StatusInvalid, match=state):
            writer.write(leases("a", 20))
    finally:
        releases.apply_crd(control_plane, releases.CURRENT_CRD)
    table = read_consumer(api_client, namespace, name)["status"]["leases"]
    assert {lease["checkpoint"] for lease in table.values()} == {str(10 + n) for n in range(6)}
    writer.write(leases("a", 20))  # under this release's CRD again: it goes on
    table = read_consumer(api_client, namespace, name)["status"]["leases"]
    assert {lease["checkpoint"] for lease in table.values()} == {str(20 + n) for n in range(6)}


def test_only_the_consumers_own_groups_are_read_or_swept(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    """Found by review: the sweep selected by name labels alone. A ConfigMap labelled
    with the name but not the object's uid (anyone's, or a deleted namesake's groups) is
    neither read nor swept, and a deleted namesake's late sweep sees none of ours."""
    _, uid = created(api_client, namespace, "again")
    core = k8s.CoreV1Api(api_client)
    labels = {CONSUMER_LABEL: "again", NAME_LABEL: LEASE_GROUP_APP}
    foreign = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="again-leases-0-labelled", labels=labels),
        data={"table.json": "{}"},
    )
    core.create_namespaced_config_map(namespace, foreign)
    namesake = KubeLeaseGroups(api_client, namespace, "again", "uid-of-a-deleted-namesake")
    namesake.create("again-leases-0-namesake", "{}", Writer(0, 1, "someone"))
    api = grouped(api_client, namespace, "again", uid)
    for holder in ("one", "two"):  # term 1's first write sweeps older terms' groups
        writer = StatusWriter(api, namespace, "again", holder=holder)
        writer.adopt(api.get())
        writer.write(leases("a", 10))
    left = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items if c.metadata}
    assert {"again-leases-0-labelled", "again-leases-0-namesake"} <= left, "not swept"
    mine = KubeLeaseGroups(api_client, namespace, "again", uid)
    strangers = {"again-leases-0-labelled", "again-leases-0-namesake"}
    assert not strangers & set(mine.contents(strangers))
    assert {g.name for g in namesake.listed()} == {"again-leases-0-namesake"}
    assert mine.drop() == 3, "a deleted consumer's groups: its own, all of them"
    assert {g.name for g in namesake.listed()} == {"again-leases-0-namesake"}


def test_a_table_moves_from_lease_groups_to_a_log_and_back(
    control_plane: ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    """The upgrade from lease groups (a table an operator before the log wrote) and the
    way back for a rollback past the log (`STREAMCONSUMER_LEASE_LOG=false`): each move
    is one write, read back whole by the operator and the CLI, and once it landed only
    the objects the new layout reads are left."""
    consumers, uid = created(api_client, namespace, "moving")
    store = KubeLeaseGroups(api_client, namespace, "moving", uid)
    checkpoint = 10
    for layout, state in (
        (LAYOUT, "InLeaseGroups"),
        (LOG, "InLeaseLog"),
        (LAYOUT, "InLeaseGroups"),
    ):
        api = grouped(api_client, namespace, "moving", uid, layout)
        writer = StatusWriter(api, namespace, "moving", holder=state)
        writer.adopt(api.get())
        for _ in range(3):  # a move, then writes in the layout moved to
            checkpoint += 10
            writer.write(leases("a", checkpoint))
        stored = consumers.get("moving")["status"]
        assert {entry["state"] for entry in stored["leases"].values()} == {state}
        table = read_consumer(api_client, namespace, "moving")["status"]["leases"]
        assert {lease["checkpoint"] for lease in table.values()} == {
            str(checkpoint + n) for n in range(6)
        }
        _, where = read_stored(stored, store)
        assert {g.name for g in store.listed()} == names_of(where), "only what it reads"
        shown = cli(control_plane, "moving", "-n", namespace)
        assert shown.returncode == 0, shown.stderr
        assert state not in shown.stdout
        assert "shardId-000000000005" in shown.stdout


def test_groups_read_at_once_are_bounded_in_total(
    api_client: k8s.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: a base may name up to 1,024 groups, each a ConfigMap of up to
    1 MiB, all held before their digests are checked. The read stops at a total (here
    lowered to below what three groups hold)."""
    _, uid = created(api_client, namespace, "heavy")
    api = grouped(api_client, namespace, "heavy", uid)
    writer = StatusWriter(api, namespace, "heavy", holder="one")
    writer.adopt(api.get())
    writer.write(leases("a", 10))
    monkeypatch.setattr(lease_group_store, "MOST_READ_BYTES", 100)
    with pytest.raises(StatusInvalid, match="named hold more than 0 MiB"):
        grouped(api_client, namespace, "heavy", uid).get()
