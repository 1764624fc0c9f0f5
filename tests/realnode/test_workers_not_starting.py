"""Workers that never start, on a real node (issue 25): the clickstream example with a
processor image that cannot be pulled (a registry on a loopback port nobody listens on:
the kubelet's real ErrImagePull / ImagePullBackOff, and no traffic leaves the machine).
`kubectl get stc` shows Ready False with reason WorkersNotStarting and the kubelet's words;
fixing the image clears it and the consumer becomes Ready."""

from __future__ import annotations

import json

import pytest

from realnode.user import NodeUser
from testbed.userpath import EXAMPLES, Kubectl, edited_example
from testbed.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]

MISSING_IMAGE = "127.0.0.1:1/team-a/clicks-processor:does-not-exist"


def ready(kubectl: Kubectl, namespace: str, name: str) -> dict[str, str]:
    """Ready's status, reason and message, as `kubectl get` reads them."""
    path = '{.status.conditions[?(@.type=="Ready")]}'
    shown = kubectl("-n", namespace, "get", "stc", name, "-o", f"jsonpath={path}")
    return json.loads(shown) if shown.strip() else {}


def columns(kubectl: Kubectl, namespace: str, name: str) -> tuple[str, str]:
    header, row = kubectl("-n", namespace, "get", "stc", name).splitlines()[:2]
    at = [header.index(column) for column in ("READY", "REASON", "AGE")]
    return row[at[0] : at[1]].strip(), row[at[1] : at[2]].strip()


def test_an_image_that_cannot_be_pulled_shows_in_kubectl_get_and_clears_once_fixed(
    user: NodeUser,
) -> None:
    cluster, kubectl, _, consumer_ns = user
    manifest = edited_example(
        EXAMPLES / "streamconsumer.yaml", MISSING_IMAGE, user.new_stream(2), user.emulator, {}
    )
    name = manifest["metadata"]["name"]
    kubectl("-n", consumer_ns, "apply", "-f", "-", input=json.dumps(manifest))

    wait_for(
        lambda: ready(kubectl, consumer_ns, name).get("reason") == "WorkersNotStarting",
        180,
        "Ready False, WorkersNotStarting",
    )
    condition = ready(kubectl, consumer_ns, name)
    assert condition["status"] == "False"
    message = condition["message"]
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert "127.0.0.1:1" in message, "the kubelet's words name the image"
    assert columns(kubectl, consumer_ns, name) == ("False", "WorkersNotStarting")
    events = kubectl(
        "-n",
        consumer_ns,
        "get",
        "events",
        "--field-selector",
        f"involvedObject.name={name},reason=WorkersNotStarting",
        "-o",
        "name",
    )
    assert events.strip(), "a WorkersNotStarting Event"

    # The fix a user makes: the right image. The rollout replaces the failing pods.
    fixed = {"spec": {"processor": {"image": cluster.images["clickstream"]}}}
    kubectl("-n", consumer_ns, "patch", "stc", name, "--type=merge", "-p", json.dumps(fixed))
    wait_for(
        lambda: ready(kubectl, consumer_ns, name).get("status") == "True",
        300,
        "Ready True once the image is fixed",
    )
    assert columns(kubectl, consumer_ns, name)[0] == "True"
