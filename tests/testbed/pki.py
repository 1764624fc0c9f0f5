"""Certificates and keys for a throw-away control plane (what envtest generates)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files the control plane and its clients use."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def create_pki(directory: Path, extra_ips: Sequence[str] = ()) -> Pki:
    """`extra_ips` are more addresses the apiserver is reached at (e.g. the `kubernetes`
    Service's cluster IP, which pods use)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = _name("streamconsumer-test-ca")

    def issued(subject: x509.Name, key: rsa.RSAPrivateKey) -> x509.CertificateBuilder:
        """A certificate from our CA for `key`, valid from a little before now."""
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
        )

    ca_cert = (
        issued(ca_name, ca_key)  # self-signed
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        name: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName] | None = None
    ) -> tuple[bytes, bytes]:
        key = _key()
        builder = issued(name, key).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    serving = leaf(
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
        ],
    )
    # Members of system:masters are cluster-admins without any RBAC binding.
    admin = leaf(_name("admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = _key()

    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.ca_key.write_bytes(_pem_key(ca_key))
    pki.serving_cert.write_bytes(serving[0])
    pki.serving_key.write_bytes(serving[1])
    pki.admin_cert.write_bytes(admin[0])
    pki.admin_key.write_bytes(admin[1])
    pki.service_account_key.write_bytes(_pem_key(sa_key))
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
