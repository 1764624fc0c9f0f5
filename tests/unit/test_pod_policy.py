"""The tenant's pod template limits (models/pod_policy.py): the lists cover Kubernetes'
schema, and the worker's own settings win over the tenant's env."""

from __future__ import annotations

import json

import pytest

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.worker_api.auth import AUDIENCE
from streamconsumer.controller.workloads.children import deployment, pod_policy_refusal
from streamconsumer.models import kubernetes_schemas
from streamconsumer.models.pod_policy import (
    SAFE_PROJECTED_SOURCES,
    SAFE_VOLUME_SOURCES,
    UNRESTRICTED,
    UNSAFE_PROJECTED_SOURCES,
    UNSAFE_VOLUME_SOURCES,
)
from streamconsumer.models.resource import CONSUMER_LABEL, NAME_LABEL, PodSettings
from testbed.specs import consumer_spec


def test_every_volume_source_of_kubernetes_is_either_allowed_or_refused() -> None:
    """A Kubernetes upgrade that adds a volume source fails here until it is sorted."""
    schema = json.loads(kubernetes_schemas.PATH.read_text())
    sources = set(schema[kubernetes_schemas.CORE + "Volume"]["properties"]) - {"name"}
    assert set(SAFE_VOLUME_SOURCES) | set(UNSAFE_VOLUME_SOURCES) == sources
    assert not set(SAFE_VOLUME_SOURCES) & set(UNSAFE_VOLUME_SOURCES)


def test_every_projected_source_of_kubernetes_is_either_allowed_or_refused() -> None:
    """A Kubernetes upgrade that adds a projected source (1.34 added podCertificate, a
    credential) fails here until it is sorted."""
    schema = json.loads(kubernetes_schemas.PATH.read_text())
    projected = schema[kubernetes_schemas.CORE + "Volume"]["properties"]["projected"]
    sources = set(projected["properties"]["sources"]["items"]["properties"])
    assert set(SAFE_PROJECTED_SOURCES) | set(UNSAFE_PROJECTED_SOURCES) == sources
    assert not set(SAFE_PROJECTED_SOURCES) & set(UNSAFE_PROJECTED_SOURCES)
    assert "serviceAccountToken" in UNSAFE_PROJECTED_SOURCES
    assert "csi" in UNSAFE_VOLUME_SOURCES, "behind spec.pod.unrestricted"


TOKEN = {"serviceAccountToken": {"audience": "sts.amazonaws.com", "path": "token"}}
REFUSED_VOLUMES = [
    pytest.param(
        [{"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io"}}],
        "spec.pod.volumes[0].csi",
        id="csi",
    ),
    pytest.param(
        [
            {"name": "plain", "emptyDir": {}},
            {"name": "kube", "projected": {"sources": [{"configMap": {"name": "a"}}, TOKEN]}},
        ],
        "spec.pod.volumes[1].projected.sources[1].serviceAccountToken",
        id="serviceAccountToken",
    ),
    pytest.param(
        [{"name": "sock", "hostPath": {"path": "/run/containerd"}}],
        "spec.pod.volumes[0].hostPath",
        id="hostPath",
    ),
    pytest.param(
        [{"name": "many", "projected": {"sources": [TOKEN] * 1000}}],
        "sources[2].serviceAccountToken and 997 more:",
        id="a-bounded-message",
    ),
]


@pytest.mark.parametrize(("volumes", "named"), REFUSED_VOLUMES)
def test_the_operator_makes_no_workers_with_a_volume_the_crd_refuses(
    volumes: list[dict[str, object]], named: str
) -> None:
    """Defence in depth (docs/security.md#pod-template): an object the CRD admitted
    before its rules did keeps the field through updates; the operator refuses it."""
    refusal = pod_policy_refusal(consumer_spec(pod={"volumes": volumes}), "team-a", frozenset())
    assert refusal is not None
    assert named in refusal
    assert refusal.endswith("no worker pods are made")
    unrestricted = consumer_spec(pod={"volumes": volumes, "unrestricted": True})
    assert pod_policy_refusal(unrestricted, "team-a", frozenset({"team-a"})) is None


def test_volumes_a_tenant_could_mount_themselves_are_made() -> None:
    volumes = [
        {"name": "s", "secret": {"secretName": "db"}},
        {"name": "c", "configMap": {"name": "settings"}},
        {"name": "e", "emptyDir": {}},
        {
            "name": "p",
            "projected": {
                "sources": [
                    {"secret": {"name": "db"}},
                    {"configMap": {"name": "settings"}},
                    {"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "x"}}]}},
                ]
            },
        },
    ]
    spec = consumer_spec(pod={"volumes": volumes})
    assert pod_policy_refusal(spec, "team-a", frozenset()) is None


def test_the_workers_own_settings_win_over_a_tenants_env() -> None:
    """A StreamConsumer applied before the CRD refused reserved names still cannot point
    the worker at another operator URL: the operator's entry comes last, and last wins."""
    spec = consumer_spec(
        processor={
            "image": "i",
            "entrypoint": "m:f",
            "env": [{"name": "POD_NAME", "value": "someone-else"}, {"name": "A", "value": "1"}],
        }
    )
    spec.processor.env.append(  # as if the CRD had not refused it
        type(spec.processor.env[0])(name="STREAMCONSUMER_OPERATOR_URL", value="http://evil")
    )
    manifest = deployment("n", "c", spec, "https://operator:8443", AUDIENCE)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    env = container["env"]
    last = {entry["name"]: entry for entry in env}
    assert last["STREAMCONSUMER_OPERATOR_URL"]["value"] == "https://operator:8443"
    assert [e["name"] for e in env].count("POD_NAME") == 1, "the pod's name is the pod's"
    assert last["A"]["value"] == "1"


def test_a_tenants_labels_never_replace_the_workers_own() -> None:
    """The Deployment's selector and the worker identity check read these labels; ours
    are merged last, so even an object the CRD did not check keeps them."""
    spec = consumer_spec(pod={"labels": {"team": "clicks"}})
    spec.pod.labels.update({CONSUMER_LABEL: "payments", NAME_LABEL: "payments"})
    template = deployment("n", "c", spec, "https://operator:8443", AUDIENCE)["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert labels[CONSUMER_LABEL] == "c"
    assert labels[NAME_LABEL] != "payments"
    assert labels["team"] == "clicks"


def test_unrestricted_pods_are_made_only_in_namespaces_the_admins_list() -> None:
    assert UNRESTRICTED in PodSettings.model_fields  # the field the CRD's rules name
    spec = consumer_spec(pod={"unrestricted": True})
    refusal = pod_policy_refusal(spec, "team-a", frozenset({"team-b"}))
    assert refusal is not None
    assert "namespace team-a" in refusal
    assert pod_policy_refusal(spec, "team-b", frozenset({"team-b"})) is None
    assert pod_policy_refusal(consumer_spec(), "team-a", frozenset()) is None


def test_the_admins_list_of_unrestricted_namespaces_is_read_as_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMCONSUMER_UNRESTRICTED_POD_NAMESPACES", '["team-b", "ml"]')
    assert OperatorConfig().unrestricted_pod_namespaces == {"team-b", "ml"}
    monkeypatch.delenv("STREAMCONSUMER_UNRESTRICTED_POD_NAMESPACES")
    assert OperatorConfig().unrestricted_pod_namespaces == frozenset()
