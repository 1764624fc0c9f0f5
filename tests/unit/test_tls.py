"""The worker API's certificates: a CA, serving certificates for the names workers use,
renewal before expiry. Verified the way a worker verifies them (Python's ssl)."""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509

from streamconsumer.controller.certificates import tls
from streamconsumer.controller.certificates.serving import ManagedServing

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def test_the_ca_is_a_ca_and_a_serving_certificate_is_not() -> None:
    ca = tls.make_ca(NOW)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    served = x509.load_pem_x509_certificate(tls.issue(ca, ["a.example"], NOW).cert_pem)
    assert not served.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert served.issuer == ca_cert.subject


def test_a_serving_certificate_names_dns_names_and_ip_addresses() -> None:
    pair = tls.issue(tls.make_ca(NOW), ["svc.ns.svc", "10.96.0.12", "svc.ns.svc"], NOW)
    assert tls.names_of(pair.cert_pem) == ["svc.ns.svc", "10.96.0.12"]


def test_no_name_no_certificate() -> None:
    with pytest.raises(ValueError, match="at least one name"):
        tls.issue(tls.make_ca(NOW), [], NOW)


def test_serving_names_cover_the_service_the_api_url_and_extras() -> None:
    names = tls.serving_names(
        "sc-operator", "system", "https://10.0.0.7:8080", ["10.0.0.7", "api.example", ""]
    )
    assert names == [
        "sc-operator.system.svc",
        "sc-operator.system.svc.cluster.local",
        "sc-operator.system",
        "sc-operator",
        "10.0.0.7",
        "api.example",
    ]


@pytest.mark.parametrize(
    ("age", "renew"),
    [
        (dt.timedelta(0), False),
        (tls.SERVING_VALIDITY - tls.RENEW_BEFORE - dt.timedelta(minutes=1), False),
        (tls.SERVING_VALIDITY - tls.RENEW_BEFORE + dt.timedelta(minutes=1), True),
        (tls.SERVING_VALIDITY + dt.timedelta(days=1), True),  # expired
        (-tls.BACKDATE - dt.timedelta(minutes=1), True),  # not valid yet (a clock behind)
    ],
)
def test_renewal_comes_before_expiry(age: dt.timedelta, renew: bool) -> None:
    pair = tls.issue(tls.make_ca(NOW), ["a.example"], NOW)
    assert tls.needs_renewal(pair.cert_pem, NOW + age) is renew


def test_managed_serving_renews_only_when_due() -> None:
    serving = ManagedServing(tls.make_ca(NOW), ["127.0.0.1"], NOW)
    first = serving.serving_cert_pem
    serving.refresh(NOW + dt.timedelta(days=1))
    assert serving.serving_cert_pem == first
    serving.refresh(NOW + tls.SERVING_VALIDITY)
    assert serving.serving_cert_pem != first
    assert not tls.needs_renewal(serving.serving_cert_pem, NOW + tls.SERVING_VALIDITY)


@contextmanager
def tls_server(context: ssl.SSLContext) -> Iterator[int]:
    """A one-connection TLS server on loopback; yields its port."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with context.wrap_socket(connection, server_side=True) as tls_connection:
                tls_connection.recv(1)
        except (ssl.SSLError, OSError):
            pass  # the client refused us

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.close()
        thread.join(timeout=5)


def handshake(port: int, ca_file: Path, host: str) -> None:
    import socket

    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        pass


def test_a_client_trusting_the_ca_verifies_the_served_certificate(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca = tls.make_ca(now)
    serving = ManagedServing(ca, ["127.0.0.1", "svc.ns.svc"], now)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    with tls_server(serving.context) as port:
        handshake(port, tmp_path / "ca.crt", "127.0.0.1")
    with tls_server(serving.context) as port, pytest.raises(ssl.SSLCertVerificationError):
        handshake(port, tmp_path / "ca.crt", "other.example")  # not a name it was issued for
    (tmp_path / "other.crt").write_bytes(tls.make_ca(now).cert_pem)
    with tls_server(serving.context) as port, pytest.raises(ssl.SSLCertVerificationError):
        handshake(port, tmp_path / "other.crt", "127.0.0.1")  # another CA
