"""The operator's CA certificate in the `<name>-operator-ca` ConfigMap of every consumer
this replica manages, kept current without a reconcile: at each round of `keep_fresh`
(serving.py) the ConfigMaps that may hold another CA than the one served now are applied
again. The kubelet then updates the workers' mounted copy and a worker re-reads it on
its next failed handshake, so a rotated CA needs no restart
(docs/security.md#the-worker-api-over-tls).

Only consumers in the registry (this replica leads and kopf runs their loops), only
while it leads, and only ConfigMaps that are theirs: `apply_owned` leaves any other
untouched (`NotOurs`; the consumer's reconcile reports it)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller import executors
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.workloads import children
from streamconsumer.controller.workloads.owned import NotOurs

log = logging.getLogger(__name__)

Key = tuple[str, str]  # a consumer's namespace and name
# apply_owned's shape: a manifest, its namespace, its owner's uid.
Apply = Callable[[dict[str, Any], str, str], None]


class CaBundles:
    """Which CA certificate this process last applied to each consumer's ConfigMap, and
    so which ones may hold another (sans-I/O). The reconcile and the upkeep both say what
    they applied, each after its apply returned: of two applies racing across a rotation,
    the later answer is remembered, and it is the later write."""

    def __init__(self) -> None:
        self._applied: dict[Key, bytes] = {}

    def applied(self, key: Key, ca_pem: bytes) -> None:
        self._applied[key] = ca_pem

    def due(self, managed: Iterable[Key], ca_pem: bytes) -> list[Key]:
        """The managed consumers whose ConfigMap may not hold `ca_pem`: one given another
        CA, or one we know nothing of (reconciled before it was loaded, or a failed
        apply). What it knows of consumers no longer managed is dropped, so its memory
        follows the registry's."""
        keys = list(dict.fromkeys(managed))
        self._applied = {k: self._applied[k] for k in keys if k in self._applied}
        return [k for k in keys if self._applied.get(k) != ca_pem]


async def spread(
    ca_pem: bytes,
    registry: Registry,
    bundles: CaBundles,
    apply: Apply,
    leading: Callable[[], bool],
) -> None:
    """Applies `ca_pem` to each managed consumer's CA ConfigMap that `bundles` says is
    due, one at a time on the Kubernetes pool (each call with its timeout, in
    `apply_owned`), so the reconciles sharing that pool keep their threads. A failure
    is logged and tried again at the next round."""
    managed = {(c.namespace, c.name): c for c in registry.managed()}
    done = 0
    for key in bundles.due(managed, ca_pem):
        consumer = managed[key]
        if not leading():  # a replica whose term ended writes nothing more
            break
        # Nor for one being deleted: its ConfigMap, maybe collected already, would be made
        # again for an owner about to go.
        owner = consumer.owner
        if not isinstance(owner, kopf.Body) or owner.metadata.deletion_timestamp:
            continue
        manifest = children.ca_bundle(consumer.name, ca_pem)
        # The whole object, as the reconcile applies it: server-side apply would drop
        # any field of ours left out (the owner reference, the labels).
        kopf.adopt(manifest, owner=owner)
        call = functools.partial(apply, manifest, consumer.namespace, owner.metadata.uid)
        try:
            await executors.run_in(executors.KUBERNETES, call)
        except NotOurs as conflict:
            log.debug("%s/%s: CA not applied: %s", *key, conflict)
            continue
        except Exception as error:  # tried again next round
            status = f" {error.status}" if isinstance(error, ApiException) else ""
            log.warning("%s/%s: CA ConfigMap not updated: %s%s", *key, type(error).__name__, status)
            continue
        bundles.applied(key, ca_pem)
        done += 1
    if done:
        log.info("consumers' CA ConfigMaps brought up to date: %d", done)
