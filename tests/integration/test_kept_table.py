"""The table of a deleted consumer's checkpoints, kept in a ConfigMap on the real
apiserver (controller/leases/kept.py::keep): written while this replica leads, never by one
whose term ended before the write."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.leases import kept
from streamconsumer.controller.names import kept_checkpoints
from streamconsumer.models import kept as kept_table
from testbed.specs import consumer_spec

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
BODY = {
    "metadata": {"creationTimestamp": "2026-11-01T00:00:00Z"},
    "status": {"leases": {"s0": {"epoch": 3, "checkpoint": "49", "state": "Active"}}},
}


def _kept(api_client: k8s.ApiClient, namespace: str) -> dict[str, str] | None:
    try:
        found = k8s.CoreV1Api(api_client).read_namespaced_config_map(
            kept_checkpoints("clicks"), namespace
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(found.data or {})


def test_a_replica_whose_term_ended_before_the_write_keeps_nothing(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    """Found by review: a replica frozen while it read what to keep, resumed after a
    standby took over and kept a newer table, forced its older one over it."""
    older = kept_table.table(namespace, "clicks", consumer_spec(), BODY, NOW, drained=True)
    with pytest.raises(kept.NoLongerLeading):
        asyncio.run(kept.keep(api_client, namespace, older, lambda: False))
    assert _kept(api_client, namespace) is None

    asyncio.run(kept.keep(api_client, namespace, older, lambda: True))
    assert _kept(api_client, namespace), "a leader keeps it"


def test_a_table_of_ten_thousand_shards_is_kept_packed_and_resumed_whole(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    """Past about 7,000 shards the table's JSON passes a ConfigMap's 1 MiB: it is kept
    gzipped in binaryData, and read back as it was (controller/leases/kept.py::read)."""
    leases = {
        f"shardId-{n:012d}": {"epoch": 3, "checkpoint": str(10**55 + n * 7919), "state": "Active"}
        for n in range(10_000)
    }
    body = {**BODY, "status": {"leases": leases}}
    big = kept_table.table(namespace, "clicks", consumer_spec(), body, NOW, drained=True)
    assert len(big.model_dump_json(by_alias=True)) > 1024 * 1024
    asyncio.run(kept.keep(api_client, namespace, big, lambda: True))
    found = k8s.CoreV1Api(api_client).read_namespaced_config_map(
        kept_checkpoints("clicks"), namespace
    )
    assert found.data is None
    assert list(found.binary_data or {}) == [kept_table.PACKED_KEY]

    data = asyncio.run(kept.read(api_client, namespace, "clicks"))
    resumed, why_not = kept_table.resumable(data, "clicks", consumer_spec(), NOW)
    assert resumed is not None, why_not
    assert {s: lease["checkpoint"] for s, lease in resumed.status["leases"].items()} == {
        s: lease["checkpoint"] for s, lease in leases.items()
    }
