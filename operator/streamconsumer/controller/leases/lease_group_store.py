"""The lease groups of one StreamConsumer as ConfigMaps (controller/leases/lease_groups.py),
labelled with the consumer's name and uid so that they can be listed, and only those of
this very object are read or swept (not a deleted namesake's, not one anyone labelled
without its uid). No owner reference: a foreground deletion would have the garbage
collector delete them before the operator keeps the table (docs/checkpoints.md); the
operator deletes them once it has (`drop`). Also how anyone but the operator (the CLI,
tests) reads a consumer with its table."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller.leases.kube_status import KubeStatusApi
from streamconsumer.controller.leases.lease_groups import (
    MAX_GROUPS,
    GroupedStatusApi,
    StoredGroup,
    Writer,
    kept_outside,
)
from streamconsumer.controller.leases.status import StatusInvalid, StatusUnavailable
from streamconsumer.controller.workloads.owned import REFUSALS, api_message
from streamconsumer.models.resource import (
    CONSUMER_LABEL,
    GROUP,
    NAME_LABEL,
    PLURAL,
    VERSION,
)

LEASE_GROUP_APP = "streamconsumer-lease-group"  # the groups' app.kubernetes.io/name
WRITTEN_BY = f"leases.{GROUP}/written-by"
CONTENT_KEY = "table.json"
CONSUMER_UID_LABEL = f"leases.{GROUP}/consumer-uid"
LIST_PAGE = 16  # ConfigMaps of up to 1 MiB each: 16 MiB read at a time at most
MOST_LISTED = 2 * MAX_GROUPS  # a table's groups, and those of older writes not swept yet
MOST_READ_BYTES = 64 * 2**20
"""Groups read at once hold at most this: 100,000 shards in lease groups are about
25 MiB of JSON, in a lease log's gzipped base a few."""


class KubeLeaseGroups:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        namespace: str,
        consumer: str,
        owner_uid: str | None,
        timeout: float = 10.0,
    ) -> None:
        self._api = k8s.CoreV1Api(api_client)
        self._namespace = namespace
        self._consumer = consumer
        self._owner_uid = owner_uid
        self._timeout = timeout
        self._labels = {CONSUMER_LABEL: consumer, NAME_LABEL: LEASE_GROUP_APP}
        if owner_uid is not None:
            self._labels[CONSUMER_UID_LABEL] = owner_uid

    def create(self, name: str, content: str, written_by: Writer) -> None:
        assert self._owner_uid is not None, "groups are written for an object of known uid"
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": self._labels,
                "annotations": {WRITTEN_BY: written_by.annotation()},
            },
            "data": {CONTENT_KEY: content},
        }
        self._call(self._api.create_namespaced_config_map, self._namespace, body)

    def read(self, name: str) -> str | None:
        try:
            found = self._call(self._api.read_namespaced_config_map, name, self._namespace)
        except _Absent:
            return None
        labels = found.metadata.labels or {}
        if any(labels.get(key) != value for key, value in self._labels.items()):
            raise StatusInvalid(f"ConfigMap {name} is not a lease group of {self._consumer}")
        return (found.data or {}).get(CONTENT_KEY)

    def delete(self, name: str) -> None:
        with contextlib.suppress(_Absent):
            self._call(self._api.delete_namespaced_config_map, name, self._namespace)

    def contents(self, names: Collection[str]) -> dict[str, str]:
        found, size = {}, 0
        for item in self._ours():
            if item.metadata.name in names:  # the rest dropped page by page
                found[item.metadata.name] = content = (item.data or {}).get(CONTENT_KEY, "")
                size += len(content)
                if size > MOST_READ_BYTES:  # anyone may name a thousand 1 MiB ConfigMaps
                    raise StatusInvalid(
                        f"the lease groups of {self._consumer} named hold more than "
                        f"{MOST_READ_BYTES // 2**20} MiB"
                    )
        return found

    def listed(self) -> list[StoredGroup]:
        return [
            StoredGroup(
                item.metadata.name,
                Writer.parse((item.metadata.annotations or {}).get(WRITTEN_BY, "")),
            )
            for item in self._ours()
        ]

    def drop(self) -> int:
        """Deletes every group of this object (its table kept or discarded); how many."""
        groups = self.listed()
        for group in groups:
            self.delete(group.name)
        return len(groups)

    def _ours(self) -> Iterator[Any]:
        """This object's groups: labelled with its name and, where known, its uid (so
        not a deleted namesake's, whose late sweep touches nothing of the new one's).
        A page at a time and no more than MOST_LISTED: anyone who may create ConfigMaps
        in the namespace can label thousands of them so."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(self._labels.items()))
        more: str | None = None
        for _ in range(MOST_LISTED // LIST_PAGE):
            page = self._call(
                self._api.list_namespaced_config_map,
                self._namespace,
                label_selector=selector,
                limit=LIST_PAGE,
                **({"_continue": more} if more else {}),
            )
            yield from page.items
            more = page.metadata._continue if page.metadata else None
            if not more:
                return
        raise StatusInvalid(
            f"more than {MOST_LISTED} ConfigMaps are labelled as lease groups of "
            f"{self._consumer}: delete those the operator did not write"
        )

    def _call(self, method: Any, *args: Any, **options: Any) -> Any:
        try:
            return method(*args, _request_timeout=self._timeout, **options)
        except ApiException as error:
            if error.status == 404:
                raise _Absent from None
            if error.status in REFUSALS:
                raise StatusInvalid(f"lease groups: {api_message(error)}") from None
            raise StatusUnavailable(f"lease groups: HTTP {error.status}: {error.reason}") from None
        except (HTTPError, OSError) as error:
            raise StatusUnavailable(f"lease groups: {error}") from None


class _Absent(Exception):
    pass


def read_consumer(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The StreamConsumer with its lease table inline, wherever it is kept; raises
    ApiException (404: none of that name), StatusInvalid or StatusUnavailable."""
    body = cast(
        dict[str, Any],
        k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        ),
    )
    if not kept_outside(body.get("status")):
        return body
    groups = KubeLeaseGroups(api_client, namespace, name, body["metadata"].get("uid"))
    status = KubeStatusApi(api_client, namespace, name)
    return GroupedStatusApi(status, groups, name).get()
