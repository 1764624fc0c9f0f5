"""The worker API's HTTPS: an SSLContext whose certificate is renewed in place (new
connections get the new one), from the operator's own CA or from mounted files
(cert-manager's Secret)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
import tempfile
from pathlib import Path
from typing import Protocol

from kubernetes import client as k8s

from streamconsumer.controller import ca_secret, executors, tls
from streamconsumer.controller.config import OperatorConfig

log = logging.getLogger(__name__)
REFRESH_SECONDS = 300.0


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


async def keep_fresh(serving: Serving, interval: float = REFRESH_SECONDS) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await executors.run_in(
                executors.KUBERNETES, lambda: serving.refresh(dt.datetime.now(dt.UTC))
            )
        except (OSError, ValueError, ssl.SSLError) as error:  # keep the current one
            log.error("worker API: serving certificate not refreshed: %s", error)


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
