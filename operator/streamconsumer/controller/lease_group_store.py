"""The lease groups of one StreamConsumer as ConfigMaps (controller/lease_groups.py):
owned by it, so that they go with it, and labelled, so that they can be listed. One of a
group's name that is not ours is never read as a group (docs/security.md#ownership).
Also how anyone but the operator (the CLI, tests) reads a consumer with its table."""

from __future__ import annotations

import contextlib
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller.lease_groups import GroupedStatusApi, StoredGroup, Writer, refs_of
from streamconsumer.controller.owned import REFUSALS, api_message, controlled_by
from streamconsumer.controller.status import KubeStatusApi, StatusInvalid, StatusUnavailable
from streamconsumer.models.resource import (
    API_VERSION,
    CONSUMER_LABEL,
    GROUP,
    KIND,
    NAME_LABEL,
    PLURAL,
    VERSION,
)

LEASE_GROUP_APP = "streamconsumer-lease-group"  # the groups' app.kubernetes.io/name
WRITTEN_BY = f"leases.{GROUP}/written-by"
CONTENT_KEY = "table.json"


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

    def create(self, name: str, content: str, written_by: Writer) -> None:
        owners = (
            [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": self._consumer,
                    "uid": self._owner_uid,
                    "controller": True,
                }
            ]
            if self._owner_uid
            else []
        )
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": self._labels,
                "annotations": {WRITTEN_BY: written_by.annotation()},
                "ownerReferences": owners,
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
        unlabelled = any(labels.get(key) != value for key, value in self._labels.items())
        owned = self._owner_uid is None or controlled_by(
            found.metadata.owner_references, self._owner_uid
        )
        if unlabelled or not owned:
            raise StatusInvalid(f"ConfigMap {name} is not a lease group of {self._consumer}")
        return (found.data or {}).get(CONTENT_KEY)

    def delete(self, name: str) -> None:
        with contextlib.suppress(_Absent):
            self._call(self._api.delete_namespaced_config_map, name, self._namespace)

    def contents(self) -> dict[str, str]:
        return {item.metadata.name: (item.data or {}).get(CONTENT_KEY, "") for item in self._ours()}

    def listed(self) -> list[StoredGroup]:
        return [
            StoredGroup(
                item.metadata.name,
                Writer.parse((item.metadata.annotations or {}).get(WRITTEN_BY, "")),
            )
            for item in self._ours()
        ]

    def _ours(self) -> list[Any]:
        """This object's groups: labelled as ours and, where its uid is known, owned by
        it (not by a deleted object of the same name, whose late writes sweep nothing
        of the new one's; not by nobody: anyone may label a ConfigMap)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(self._labels.items()))
        found = self._call(
            self._api.list_namespaced_config_map, self._namespace, label_selector=selector
        )
        return [
            item
            for item in found.items
            if self._owner_uid is None
            or controlled_by(item.metadata.owner_references, self._owner_uid)
        ]

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
    if refs_of(body.get("status")) is None:
        return body
    groups = KubeLeaseGroups(api_client, namespace, name, body["metadata"].get("uid"))
    status = KubeStatusApi(api_client, namespace, name)
    return GroupedStatusApi(status, groups, name).get()
