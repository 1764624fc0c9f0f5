"""The leader's Lease on the real apiserver (controller/election/leadership.py::KubeLeaseLock):
each swap is conditional on the version read, and leaves alone what others put on the
Lease."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from streamconsumer.controller.election.leadership import KubeLeaseLock, LockConflict
from streamconsumer.core.election import Act, Action

NAME = "streamconsumer-operator"


def test_renewals_keep_the_leases_labels_and_refuse_a_stale_version(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    """Found by review: a renewal PUT a bare Lease, so any label, annotation or owner
    someone put on it (a cost label, a GitOps annotation) was dropped every few seconds."""
    lock = KubeLeaseLock(api_client, namespace, NAME, timeout=5.0)
    created = lock.swap(Action(Act.CREATE), "replica-a", 15.0)
    k8s.CoordinationV1Api(api_client).patch_namespaced_lease(
        NAME, namespace, {"metadata": {"labels": {"team": "payments"}}}
    )
    labelled = lock.get()
    assert labelled is not None

    renewed = lock.swap(Action(Act.RENEW, labelled.version, 0), "replica-a", 15.0)
    lease = k8s.CoordinationV1Api(api_client).read_namespaced_lease(NAME, namespace)
    assert lease.metadata is not None
    assert lease.spec is not None
    assert lease.metadata.labels == {"team": "payments"}
    assert lease.spec.holder_identity == "replica-a"
    assert renewed.version == lease.metadata.resource_version

    with pytest.raises(LockConflict):  # a version older than the one read
        lock.swap(Action(Act.ACQUIRE, created.version, 1), "replica-b", 15.0)
    read = lock.get()
    assert read is not None
    assert read == renewed  # the stale swap changed nothing
    k8s.CoordinationV1Api(api_client).patch_namespaced_lease(
        NAME, namespace, {"metadata": {"labels": {"team": "billing"}}}
    )
    with pytest.raises(LockConflict):  # moved on since it was read: the apiserver's 409
        lock.swap(Action(Act.ACQUIRE, read.version, 1), "replica-b", 15.0)
    lease = k8s.CoordinationV1Api(api_client).read_namespaced_lease(NAME, namespace)
    assert lease.spec is not None
    assert lease.spec.holder_identity == "replica-a"
