"""A lease table kept as a lease log (docs/design.md#the-lease-log), on the real
apiserver with two real operator replicas, real workers and kinesis-local: the operators
keep tables past 2 entries in 3 ConfigMaps, so these 4 shards' table is in groups from
the first write. A split, a merge and the leader killed: parents before children,
nothing lost, nothing twice, no shard moved by the failover. Deleted in the foreground:
the table is kept from the groups, which go after it."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.leases.lease_group_store import (
    CONSUMER_UID_LABEL,
    LEASE_GROUP_APP,
    KubeLeaseGroups,
)
from streamconsumer.controller.leases.lease_groups import Stored, names_of, read_stored
from streamconsumer.controller.leases.lease_log import Chain
from streamconsumer.controller.names import kept_checkpoints
from streamconsumer.core.lineage import SHARD_END, expand
from streamconsumer.models import GROUP, PLURAL, VERSION
from streamconsumer.models.kept import TABLE_KEY, KeptTable, kept_data
from streamconsumer.models.resource import NAME_LABEL
from testbed.handover import hand_over, start_with_two_operators
from testbed.kinesis import list_all_shards
from testbed.operator_process import LEASE_GROUPS_PAST_TWO
from testbed.scenario import Scenario
from testbed.waiting import wait_for


def _config_maps(scenario: Scenario) -> dict[str, str | None]:
    """The lease groups' ConfigMaps: name -> the uid of the consumer they are of."""
    listed = k8s.CoreV1Api(scenario.api_client).list_namespaced_config_map(
        scenario.namespace, label_selector=f"{NAME_LABEL}={LEASE_GROUP_APP}"
    )
    groups: dict[str, str | None] = {}
    for item in listed.items:
        meta = item.metadata
        assert meta is not None
        assert meta.name is not None
        groups[meta.name] = (meta.labels or {}).get(CONSUMER_UID_LABEL)
    return groups


def _stored(scenario: Scenario) -> Stored:
    """Where the stored status keeps its table, read through the objects it names."""
    uid = scenario.consumers.get(scenario.name)["metadata"]["uid"]
    store = KubeLeaseGroups(scenario.api_client, scenario.namespace, scenario.name, uid)
    return read_stored(scenario.stored_status(), store)[1]


def _referenced(scenario: Scenario) -> set[str]:
    return names_of(_stored(scenario))


def _position(checkpoint: str | None) -> float:
    return float("inf") if checkpoint == SHARD_END else int(checkpoint or 0)


def _kept(scenario: Scenario) -> KeptTable | None:
    try:
        found = k8s.CoreV1Api(scenario.api_client).read_namespaced_config_map(
            kept_checkpoints(scenario.name), scenario.namespace
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    text = kept_data(found.data, found.binary_data).get(TABLE_KEY)
    return KeptTable.model_validate_json(text) if text else None


def test_a_table_in_lease_groups_through_a_reshard_and_a_failover(scenario: Scenario) -> None:
    scenario.operator_env = LEASE_GROUPS_PAST_TWO
    start_with_two_operators(scenario)
    log = _stored(scenario)
    assert isinstance(log, Chain), "a lease log"
    assert len(log.groups) == 3
    assert len(log.table.leases) == 4
    assert len(scenario.status()["leases"]) == 4  # read back through the groups
    uid = scenario.consumers.get(scenario.name)["metadata"]["uid"]
    groups = _config_maps(scenario)
    assert _referenced(scenario) <= set(groups)
    assert set(groups.values()) == {uid}

    client = scenario.kinesis.client
    first = scenario.split_and_merge(100)
    parents = {first[0], first[2], first[3]}

    def parents_finished() -> bool:
        status = scenario.status()  # finished shards, too, are kept in the groups
        return parents <= expand(status["finishedShards"]) and parents.isdisjoint(status["leases"])

    wait_for(parents_finished, 30, "the parents finished and their leases gone")

    handover = hand_over(scenario, "kill")  # the new leader reads the table from its groups
    assert handover.new_leader != handover.old_leader
    assert handover.owners_after == handover.owners_before, "no shard moved"
    report = scenario.delivered(duplicates_at_most=0)
    assert report.children_before_parents(list_all_shards(client, scenario.stream)) == []
    # Groups replaced by later writes are deleted; only a write that failed leaves one,
    # for the next sweep. None failed here.
    wait_for(
        lambda: set(_config_maps(scenario)) == _referenced(scenario),
        30,
        "only the groups the status references",
    )

    # Deleted as `kubectl delete --cascade=foreground` (Argo CD may do so): the garbage
    # collector deletes what the object owns first. The groups it does not own: the
    # operator keeps the table from them, then deletes them.
    leases = scenario.status()["leases"]
    k8s.CustomObjectsApi(scenario.api_client).delete_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, PLURAL, scenario.name, propagation_policy="Foreground"
    )
    wait_for(lambda: _kept(scenario) is not None, 90, "the table kept")
    kept = _kept(scenario)
    assert kept is not None
    kept_at = {shard: lease.get("checkpoint") for shard, lease in kept.status["leases"].items()}
    assert set(kept_at) == set(leases), "every shard's position kept"
    for shard, lease in leases.items():  # (the farewell's hand-offs may checkpoint once more)
        assert _position(kept_at[shard]) >= _position(lease.get("checkpoint")), shard
    wait_for(lambda: not _config_maps(scenario), 60, "the groups deleted once it was kept")
