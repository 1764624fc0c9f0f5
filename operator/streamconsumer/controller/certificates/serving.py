"""The worker API's HTTPS: an SSLContext whose certificate is renewed in place (new
connections get the new one), from the operator's own CA or from mounted files
(cert-manager's Secret)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from kubernetes import client as k8s

from streamconsumer.controller import executors
from streamconsumer.controller.certificates import ca_secret, tls
from streamconsumer.controller.config import OperatorConfig

log = logging.getLogger(__name__)


class Serving(Protocol):
    context: ssl.SSLContext
    ca_pem: bytes  # what workers trust (the CA certificate, never its key)

    def refresh(self, now: dt.datetime) -> None: ...


class ManagedServing:
    """A serving certificate issued by the operator's CA, re-issued before it expires."""

    def __init__(self, ca: tls.KeyPair, names: list[str], now: dt.datetime) -> None:
        self._ca, self._names = ca, names
        self.ca_pem = ca.cert_pem
        self.context = _server_context()
        self._pair = tls.issue(ca, names, now)
        _load(self.context, self._pair)

    @property
    def serving_cert_pem(self) -> bytes:
        return self._pair.cert_pem

    def refresh(self, now: dt.datetime) -> None:
        if tls.needs_renewal(self._pair.cert_pem, now):
            self._pair = tls.issue(self._ca, self._names, now)
            _load(self.context, self._pair)
            log.info("worker API: serving certificate renewed")


class MountedServing:
    """tls.crt, tls.key and ca.crt from a directory (cert-manager's Secret, mounted);
    the kubelet updates the files when cert-manager renews, and we reload them."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.context = _server_context()
        self._pair = self._read()
        self.ca_pem = (directory / "ca.crt").read_bytes()
        _load(self.context, self._pair)

    def _read(self) -> tls.KeyPair:
        return tls.KeyPair(
            (self._directory / "tls.crt").read_bytes(), (self._directory / "tls.key").read_bytes()
        )

    def refresh(self, now: dt.datetime) -> None:
        self.ca_pem = (self._directory / "ca.crt").read_bytes()  # cert-manager may rotate it
        pair = self._read()
        if pair != self._pair:
            self._pair = pair
            _load(self.context, pair)
            log.info("worker API: serving certificate reloaded from %s", self._directory)


def serving_for(config: OperatorConfig, api_client: k8s.ApiClient) -> Serving | None:
    """None when the API URL is plain http:// (local development and tests)."""
    if not config.api_url.startswith("https://"):
        return None
    if config.tls_cert_dir:
        return MountedServing(Path(config.tls_cert_dir))
    now = dt.datetime.now(dt.UTC)
    ca = ca_secret.load_or_create(
        k8s.CoreV1Api(api_client),
        config.namespace,
        config.tls_ca_secret,
        lambda: tls.make_ca(now),
    )
    names = tls.serving_names(
        config.service_name, config.namespace, config.api_url, config.tls_sans
    )
    return ManagedServing(ca, names, now)


CA_BUNDLE_KEY = "ca.crt"


def publish_ca(core: k8s.CoreV1Api, namespace: str, name: str, ca_pem: bytes) -> None:
    """The CA certificate (never its key) in a ConfigMap of the operator's namespace, for
    whoever verifies the API from outside the workers (the ServiceMonitor): they trust
    a ConfigMap, never the Secret that holds the CA's key."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "streamconsumer-operator"}},
        "data": {CA_BUNDLE_KEY: ca_pem.decode()},
    }
    core.patch_namespaced_config_map(
        name,
        namespace,
        body,
        field_manager="streamconsumer-operator",
        force=True,
        _content_type="application/apply-patch+yaml",
        _request_timeout=10.0,
    )


async def keep_fresh(
    serving: Serving,
    publish: Callable[[bytes], None],
    spread: Callable[[bytes], Awaitable[None]],
    interval: float,
) -> None:
    """Renews or reloads the serving certificate every `interval`, publishes the CA
    certificate whenever it is not yet published as it is now, and has `spread` bring it
    to the consumers' ConfigMaps that may hold another (ca_upkeep.py)."""
    published: bytes | None = None
    while True:
        try:
            await executors.run_in(
                executors.KUBERNETES, lambda: serving.refresh(dt.datetime.now(dt.UTC))
            )
        except (OSError, ValueError, ssl.SSLError) as error:  # keep the current one
            log.error("worker API: serving certificate not refreshed: %s", error)
        ca_pem = serving.ca_pem
        if ca_pem != published:
            try:
                await executors.run_in(executors.KUBERNETES, functools.partial(publish, ca_pem))
                published = ca_pem
            except Exception as error:  # tried again next round
                log.warning("worker API: CA bundle not published: %s", type(error).__name__)
        try:
            await spread(ca_pem)
        except Exception:  # a bug of ours: the certificate's upkeep goes on
            log.exception("worker API: the consumers' CA ConfigMaps not brought up to date")
        await asyncio.sleep(interval)


def _server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _load(context: ssl.SSLContext, pair: tls.KeyPair) -> None:
    # The ssl module loads keys from files only: a private directory, gone at once.
    with tempfile.TemporaryDirectory(prefix="streamconsumer-tls-") as directory:
        cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert.write_bytes(pair.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(pair.key_pem)
        context.load_cert_chain(cert, key)
