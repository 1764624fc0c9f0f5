"""Typed access to StreamConsumer objects for tests (the generated client returns `object`)."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.models import GROUP, PLURAL, VERSION

Object = dict[str, Any]


class StreamConsumers:
    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self._api = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace

    def _args(self) -> tuple[str, str, str, str]:
        return GROUP, VERSION, self.namespace, PLURAL

    def create(self, body: Object) -> Object:
        return cast(Object, self._api.create_namespaced_custom_object(*self._args(), body))

    def get(self, name: str) -> Object:
        return cast(Object, self._api.get_namespaced_custom_object(*self._args(), name))

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def conditions(self, name: str) -> dict[str, dict[str, str]]:
        """Its status conditions by type."""
        listed = self.get(name).get("status", {}).get("conditions", [])
        return {c["type"]: c for c in listed}

    def delete(self, name: str) -> None:
        self._api.delete_namespaced_custom_object(*self._args(), name)

    def patch(self, name: str, body: Object) -> Object:
        """A JSON merge patch, as `kubectl patch --type merge`."""
        return cast(Object, self._api.patch_namespaced_custom_object(*self._args(), name, body))

    def replace_status(self, name: str, body: Object) -> Object:
        return cast(
            Object, self._api.replace_namespaced_custom_object_status(*self._args(), name, body)
        )

    def patch_scale(self, name: str, replicas: int) -> Object:
        body = {"spec": {"replicas": replicas}}
        return cast(
            Object, self._api.patch_namespaced_custom_object_scale(*self._args(), name, body)
        )

    def get_scale(self, name: str) -> Object:
        return cast(Object, self._api.get_namespaced_custom_object_scale(*self._args(), name))


def deployment(name: str, image: str, replicas: int, labels: dict[str, str]) -> k8s.V1Deployment:
    """A Deployment of `replicas` pods of one container running `image`, labelled `labels`
    (its selector): one not made by the operator."""
    return k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1DeploymentSpec(
            replicas=replicas,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="main", image=image)]),
            ),
        ),
    )
