"""A rotated CA, on the real operator process and apiserver: the operator serves from a
mounted Secret (cert-manager's way, `STREAMCONSUMER_TLS_CERT_DIR`) whose CA is replaced,
and an existing consumer's `<name>-operator-ca` ConfigMap gets the new CA certificate by
itself, with no StreamConsumer event (no spec change, no restart); a ConfigMap of a
consumer's name that is not the consumer's is left untouched."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.certificates import tls
from streamconsumer.controller.certificates.serving import CA_BUNDLE_KEY
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.names import operator_ca
from streamconsumer.models import KIND
from streamconsumer.models.resource import CA_FILE
from testbed.controlplane import ControlPlane
from testbed.kube import StreamConsumers
from testbed.operator_process import OperatorProcess
from testbed.specs import consumer_manifest
from testbed.waiting import wait_for

REFRESH_SECONDS = 0.5
BUNDLE = OperatorConfig.model_fields["tls_ca_bundle"].default  # the operator's own


def mount(directory: Path, ca: tls.KeyPair) -> None:
    """tls.crt, tls.key and ca.crt as the kubelet updates a Secret's volume: the files are
    links into `..data`, itself a link switched in one rename, so a reader never sees a
    certificate with another's key."""
    directory.mkdir(exist_ok=True)
    serving = tls.issue(ca, ["127.0.0.1"], dt.datetime.now(dt.UTC))
    files = {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": ca.cert_pem}
    version = directory / f"..{os.urandom(4).hex()}"
    version.mkdir()
    for name, content in files.items():
        (version / name).write_bytes(content)
    (directory / "..data_tmp").symlink_to(version.name)
    (directory / "..data_tmp").rename(directory / "..data")
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def handshake(port: int, ca_pem: str) -> None:
    """What a worker does with its mounted CA: verify the operator (and its name)."""
    context = ssl.create_default_context(cadata=ca_pem)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass


def test_a_rotated_ca_reaches_an_existing_consumers_configmap_without_a_reconcile(
    api_client: k8s.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    core = k8s.CoreV1Api(api_client)
    consumers = StreamConsumers(api_client, namespace)
    certs = tmp_path / "tls"
    first = tls.make_ca(dt.datetime.now(dt.UTC), "first-ca")
    mount(certs, first)
    # Someone else's ConfigMap of the name the consumer "squatted" needs.
    squatter = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=operator_ca("squatted")), data={CA_FILE: "theirs"}
    )
    core.create_namespaced_config_map(namespace, squatter)
    operator = OperatorProcess(
        control_plane.kubeconfig,
        namespace,
        tmp_path / "operator",
        tls=True,
        env={
            "STREAMCONSUMER_TLS_CERT_DIR": str(certs),
            "STREAMCONSUMER_TLS_REFRESH_SECONDS": str(REFRESH_SECONDS),
        },
    ).start()
    try:

        def ca_of(name: str) -> str | None:
            try:
                config_map = core.read_namespaced_config_map(operator_ca(name), namespace)
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return (config_map.data or {}).get(CA_FILE)

        def degraded(name: str) -> str:
            conditions = consumers.get(name).get("status", {}).get("conditions", [])
            return next((c["message"] for c in conditions if c["type"] == "Degraded"), "")

        consumers.create(consumer_manifest("clicks"))
        consumers.create(consumer_manifest("squatted"))
        # Both consumers are managed: their loops have written their status.
        wait_for(lambda: "status" in consumers.get("clicks"), 60, "clicks' status")
        wait_for(lambda: ca_of("clicks") == first.cert_pem.decode(), 60, "the first CA")
        wait_for(
            lambda: "ConfigMap squatted-operator-ca exists" in degraded("squatted"),
            60,
            "squatted's conflict in its Degraded condition",
        )
        generation = consumers.get("clicks")["metadata"]["generation"]
        theirs = core.read_namespaced_config_map(operator_ca("squatted"), namespace).metadata
        assert theirs is not None
        pid = operator.pid

        second = tls.make_ca(dt.datetime.now(dt.UTC), "second-ca")
        mount(certs, second)

        def published() -> str | None:
            bundle = core.read_namespaced_config_map(BUNDLE, namespace)
            return (bundle.data or {}).get(CA_BUNDLE_KEY)

        wait_for(lambda: published() == second.cert_pem.decode(), 30, "the operator's bundle")
        wait_for(
            lambda: ca_of("clicks") == second.cert_pem.decode(),
            30,
            "the second CA in clicks' ConfigMap",
        )
        assert consumers.get("clicks")["metadata"]["generation"] == generation, "no spec change"
        assert operator.pid == pid, "no restart, so no resume"
        assert operator.exit_code() is None
        mine = core.read_namespaced_config_map(operator_ca("clicks"), namespace).metadata
        assert mine is not None
        owners = [(r.kind, r.name, r.controller) for r in mine.owner_references or []]
        assert owners == [(KIND, "clicks", True)], "still the StreamConsumer's, GC'd with it"
        # A worker trusting the ConfigMap's CA now verifies the operator.
        handshake(operator.port, ca_of("clicks") or "")

        after = core.read_namespaced_config_map(operator_ca("squatted"), namespace)
        assert after.metadata is not None
        assert after.metadata.resource_version == theirs.resource_version, "not ours: untouched"
        assert not after.metadata.owner_references
        assert after.data == {CA_FILE: "theirs"}
    finally:
        operator.stop()
