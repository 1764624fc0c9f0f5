"""The operator's CA in a Secret of its own namespace, created if absent. Operator
replicas may start together: whoever creates it first wins and the others read it, so
every replica serves a certificate from the same CA."""

from __future__ import annotations

import base64
from collections.abc import Callable

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer.controller.certificates.tls import KeyPair

# cert-manager's CA Issuer reads the same keys, so either can sign from this Secret.
CERT_KEY, KEY_KEY = "tls.crt", "tls.key"


def load_or_create(
    core: k8s.CoreV1Api, namespace: str, name: str, make: Callable[[], KeyPair]
) -> KeyPair:
    try:
        return _pair(core.read_namespaced_secret(name, namespace))
    except ApiException as error:
        if error.status != 404:
            raise
    made = make()
    body = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(
            name=name, labels={"app.kubernetes.io/name": "streamconsumer-operator"}
        ),
        type="kubernetes.io/tls",
        data={CERT_KEY: _b64(made.cert_pem), KEY_KEY: _b64(made.key_pem)},
    )
    try:
        core.create_namespaced_secret(namespace, body)
        return made
    except ApiException as error:
        if error.status != 409:
            raise
    # Another replica created it between our read and our create: theirs is the CA.
    return _pair(core.read_namespaced_secret(name, namespace))


def _pair(secret: k8s.V1Secret) -> KeyPair:
    data = secret.data or {}
    try:
        return KeyPair(base64.b64decode(data[CERT_KEY]), base64.b64decode(data[KEY_KEY]))
    except KeyError as missing:
        name = secret.metadata.name if secret.metadata else "?"
        raise ValueError(f"Secret {name} has no {missing} (delete it to make a new CA)") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
