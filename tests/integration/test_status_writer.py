"""Status writes on the real apiserver: a writer whose view is stale cannot overwrite a
newer lease table; someone else's spec or metadata change is not mistaken for one."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.status import StaleState, StatusWriter
from testbed.kube import StreamConsumers

from .test_control_plane import sample_consumer


def leases(owner: str, checkpoint: str) -> dict[str, object]:
    return {
        "leases": {
            "shardId-0": {"owner": owner, "epoch": 1, "checkpoint": checkpoint, "state": "Active"}
        }
    }


def test_stale_writer_is_refused_and_spec_changes_are_not(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    consumers = StreamConsumers(api_client, namespace)
    consumers.create(sample_consumer("guarded"))
    api = KubeStatusApi(api_client, namespace, "guarded")
    active = StatusWriter(api, namespace, "guarded", holder="active")
    stale = StatusWriter(api, namespace, "guarded", holder="stale")
    body = consumers.get("guarded")
    active.adopt(body)
    stale.adopt(body)

    active.write(leases("a", "10"))
    consumers.patch_scale("guarded", 4)  # a user scales: spec changes, status does not
    active.write(leases("a", "20"))
    assert active.writes == 2, "a spec change is retried, not taken for a newer table"

    with pytest.raises(StaleState) as refused:
        stale.write(leases("b", "5"))
    assert refused.value.current["status"]["leases"]["shardId-0"]["checkpoint"] == "20"
    assert consumers.get("guarded")["status"]["leases"]["shardId-0"]["owner"] == "a"
