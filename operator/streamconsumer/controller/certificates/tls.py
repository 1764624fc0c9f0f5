"""The worker API's certificates, pure: make a CA, issue a serving certificate for the
names workers use, decide when to renew. No I/O; the CA's Secret is `ca_secret`'s job
and serving it `serving`'s."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "streamconsumer-operator-ca"
CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=30)
# Renew a serving certificate once a third of its life is left (cert-manager's default).
RENEW_BEFORE = SERVING_VALIDITY / 3
# Tolerate clocks a little behind ours (nodes are not perfectly in sync).
BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def make_ca(now: dt.datetime, common_name: str = CA_NAME) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key(), now, CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signing=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_cert_pem(cert), _key_pem(key))


def issue(ca: KeyPair, sans: Iterable[str], now: dt.datetime) -> KeyPair:
    """A serving certificate signed by `ca`, for DNS names and IP addresses alike."""
    names = list(dict.fromkeys(sans))  # in order, once each
    if not names:
        raise ValueError("a serving certificate needs at least one name")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), now, SERVING_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signing=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(_cert_pem(cert), _key_pem(key))


def needs_renewal(cert_pem: bytes, now: dt.datetime, before: dt.timedelta = RENEW_BEFORE) -> bool:
    """True when the certificate expires within `before`, or is not valid yet."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return not (cert.not_valid_before_utc <= now < cert.not_valid_after_utc - before)


def names_of(cert_pem: bytes) -> list[str]:
    """The certificate's subject alternative names, as `issue` takes them."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(v) for v in sans.get_values_for_type(x509.DNSName)] + [
        str(v) for v in sans.get_values_for_type(x509.IPAddress)
    ]


def serving_names(
    service: str, namespace: str, api_url: str, extra: Iterable[str] = ()
) -> list[str]:
    """Every name a worker may reach the operator by: the Service's DNS names, the host
    STREAMCONSUMER_API_URL names (the chart's default is the Service's cluster IP) and
    any extra (the cluster IP, a custom name)."""
    names = [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    ]
    host = urlsplit(api_url).hostname
    if host:
        names.append(host)
    names.extend(n for n in extra if n)
    return list(dict.fromkeys(names))


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: dt.datetime,
    validity: dt.timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
    )


def _key_usage(signing: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signing,
        crl_sign=signing,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
