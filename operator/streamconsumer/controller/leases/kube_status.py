"""The status port (`status.StatusApi`) of one StreamConsumer on a Kubernetes apiserver:
its answers turned into the writer's outcomes (`Conflict`, `StatusInvalid`,
`StatusUnavailable`)."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from streamconsumer.controller.leases.status import Conflict, StatusInvalid, StatusUnavailable
from streamconsumer.controller.workloads.owned import JSON_PATCH, api_message, replacing
from streamconsumer.models import GROUP, PLURAL, VERSION


class KubeStatusApi:
    """The StatusApi of one StreamConsumer on a Kubernetes apiserver."""

    def __init__(
        self, api_client: k8s.ApiClient, namespace: str, name: str, timeout: float = 10.0
    ) -> None:
        self._api = k8s.CustomObjectsApi(api_client)
        self._where = (GROUP, VERSION, namespace, PLURAL, name)
        self._timeout = timeout

    def get(self) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self._call(self._api.get_namespaced_custom_object, *self._where),
        )

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        # A JSON patch, not a PUT: a PUT's object carries no annotations, and the
        # apiserver, though it keeps the stored ones, takes them from their owners in
        # managedFields (who asked for a pause was lost; an annotation a GitOps tool
        # applies would no longer be its own). A patch starts from the stored object.
        # The resourceVersion set in it is a precondition, as in a PUT: 409 if it moved.
        version = body["metadata"].get("resourceVersion")
        if version is None:  # the term fence needs every write conditional
            raise ValueError("a status write names the resourceVersion it replaces")
        patch = replacing(version, "/status", body["status"])
        return cast(
            dict[str, Any],
            self._call(
                self._api.patch_namespaced_custom_object_status,
                *self._where,
                patch,
                _content_type=JSON_PATCH,
            ),
        )

    def _call(self, method: Any, *args: Any, **options: Any) -> Any:
        try:
            return method(*args, _request_timeout=self._timeout, **options)
        except ApiException as error:
            if error.status == 409:
                raise Conflict(error.reason) from None
            if error.status in (400, 422):
                raise StatusInvalid(api_message(error)) from None
            raise StatusUnavailable(f"HTTP {error.status}: {error.reason}") from None
        except (HTTPError, OSError) as error:
            raise StatusUnavailable(str(error)) from None
