"""The tenant's pod template limits (models/pod_policy.py): the lists cover Kubernetes'
schema, and the worker's own settings win over the tenant's env."""

from __future__ import annotations

import json

from streamconsumer.controller.auth import AUDIENCE
from streamconsumer.controller.children import deployment
from streamconsumer.models import kubernetes_schemas
from streamconsumer.models.pod_policy import SAFE_VOLUME_SOURCES, UNSAFE_VOLUME_SOURCES
from testbed.specs import consumer_spec


def test_every_volume_source_of_kubernetes_is_either_allowed_or_refused() -> None:
    """A Kubernetes upgrade that adds a volume source fails here until it is sorted."""
    schema = json.loads(kubernetes_schemas.PATH.read_text())
    sources = set(schema[kubernetes_schemas.CORE + "Volume"]["properties"]) - {"name"}
    assert set(SAFE_VOLUME_SOURCES) | set(UNSAFE_VOLUME_SOURCES) == sources
    assert not set(SAFE_VOLUME_SOURCES) & set(UNSAFE_VOLUME_SOURCES)


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
