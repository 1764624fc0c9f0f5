"""A rotated CA reaches the consumers' CA ConfigMaps without a reconcile: which ones are
due (`CaBundles`, pure), and what the upkeep applies, to whom, and when it stops."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from streamconsumer.controller.certificates.ca_upkeep import CaBundles, spread
from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.workloads.children import ca_bundle
from streamconsumer.controller.workloads.owned import NotOurs
from streamconsumer.models import API_VERSION, KIND
from streamconsumer.models.resource import CA_FILE
from testbed.specs import consumer_spec

from .moments import CREATED

OLD, NEW = b"old CA\n", b"new CA\n"


def test_only_configmaps_given_another_ca_or_unknown_are_due() -> None:
    bundles = CaBundles()
    bundles.applied(("a", "x"), OLD)
    bundles.applied(("a", "y"), NEW)
    managed = [("a", "x"), ("a", "y"), ("b", "z")]
    assert bundles.due(managed, OLD) == [("a", "y"), ("b", "z")], "z: never applied here"
    assert bundles.due(managed, NEW) == [("a", "x"), ("b", "z")]
    for key in managed:
        bundles.applied(key, NEW)
    assert bundles.due(managed, NEW) == [], "all up to date: nothing to apply"


def test_what_it_knows_of_consumers_no_longer_managed_is_dropped() -> None:
    bundles = CaBundles()
    bundles.applied(("a", "gone"), NEW)
    bundles.applied(("a", "kept"), NEW)
    assert bundles.due([("a", "kept")], NEW) == []
    # Managed again (a new StreamConsumer of that name): unknown, so due.
    assert bundles.due([("a", "gone"), ("a", "kept")], NEW) == [("a", "gone")]


def managed(name: str, uid: str | None = None, deleted: bool = False) -> ManagedConsumer:
    coordinator = LeaseCoordinator(consumer_spec(), DurableState(), 0.0, created=CREATED)
    loop = ConsumerLoop(name, coordinator, LoopSettings(), lambda: 1)
    owner = None
    if uid is not None:
        meta: Any = {"name": name, "namespace": "team", "uid": uid, "labels": {"team": "a"}}
        if deleted:
            meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
        owner = kopf.Body({"apiVersion": API_VERSION, "kind": KIND, "metadata": meta})
    return ManagedConsumer("team", name, loop, owner=owner)


class Apiserver:
    """apply_owned's port: records each apply; `not_ours` names ConfigMaps of others."""

    def __init__(self, not_ours: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> None:
        self.applied: list[tuple[dict[str, Any], str, str]] = []
        self.not_ours, self.failing = not_ours, failing

    def __call__(self, manifest: dict[str, Any], namespace: str, owner_uid: str) -> None:
        name = manifest["metadata"]["name"]
        if name in self.not_ours:
            raise NotOurs("ConfigMap", name)
        if name in self.failing:
            raise TimeoutError(name)
        self.applied.append((manifest, namespace, owner_uid))


def registry_of(*consumers: ManagedConsumer) -> Registry:
    registry = Registry(lambda: 0.0)
    for consumer in consumers:
        registry.add(consumer)
    return registry


def test_the_new_ca_is_applied_as_the_reconcile_applies_it_and_only_once() -> None:
    registry = registry_of(managed("clicks", uid="u-1"))
    bundles, apiserver = CaBundles(), Apiserver()
    bundles.applied(("team", "clicks"), OLD)  # the reconcile's
    asyncio.run(spread(NEW, registry, bundles, apiserver, lambda: True))
    [(manifest, namespace, uid)] = apiserver.applied
    assert (namespace, uid) == ("team", "u-1"), "applied only while its owner is u-1"
    assert manifest["data"] == ca_bundle("clicks", NEW)["data"] == {CA_FILE: NEW.decode()}
    # The whole object, as kopf.adopt makes it for the reconcile: nothing of ours dropped.
    [owner] = manifest["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (KIND, "u-1", True)
    assert manifest["metadata"]["labels"]["team"] == "a"
    asyncio.run(spread(NEW, registry, bundles, apiserver, lambda: True))
    assert len(apiserver.applied) == 1, "up to date: not applied again"


def test_a_configmap_not_ours_or_a_failed_apply_is_tried_again_next_round() -> None:
    registry = registry_of(
        managed("clicks", uid="u-1"), managed("squatted", uid="u-2"), managed("slow", uid="u-3")
    )
    bundles = CaBundles()
    apiserver = Apiserver(not_ours=("squatted-operator-ca",), failing=("slow-operator-ca",))
    asyncio.run(spread(NEW, registry, bundles, apiserver, lambda: True))
    assert [m["metadata"]["name"] for m, _, _ in apiserver.applied] == ["clicks-operator-ca"]
    assert bundles.due([("team", "clicks"), ("team", "squatted"), ("team", "slow")], NEW) == [
        ("team", "squatted"),
        ("team", "slow"),
    ]


def test_a_replica_that_does_not_lead_applies_nothing() -> None:
    registry = registry_of(managed("clicks", uid="u-1"))
    apiserver = Apiserver()
    asyncio.run(spread(NEW, registry, CaBundles(), apiserver, lambda: False))
    assert apiserver.applied == []


def test_nothing_is_applied_for_a_consumer_being_deleted() -> None:
    apiserver = Apiserver()
    going = registry_of(managed("clicks", uid="u-1", deleted=True))
    asyncio.run(spread(NEW, going, CaBundles(), apiserver, lambda: True))
    assert apiserver.applied == []
