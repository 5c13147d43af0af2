"""Credentials of a deployment: a TLS certificate authority and SuperNode keys.

Flower's deployment engine (1.42) speaks HTTPS between SuperNodes, the SuperLink and the
`flwr` CLI when given a server certificate, and admits only registered SuperNodes when
the SuperLink runs with `--enable-supernode-auth`: each SuperNode signs its requests with
an elliptic-curve private key (OpenSSH format) whose public half an operator registered
with `flwr supernode register`. This module makes both, so that a loopback test, a
first try across machines and the README's commands need nothing but this package
(`cryptography` comes with Flower). Production sites will bring their own CA.

Private keys are written with mode 0600. Certificates are valid for `VALID_DAYS`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
NODE_CURVE = ec.SECP384R1()
"""Flower accepts SuperNode keys on NIST curves only."""


@dataclass(frozen=True)
class TlsFiles:
    """The SuperLink's certificate and key, and the CA that every client trusts."""

    ca_certificate: Path
    certificate: Path
    key: Path


@dataclass(frozen=True)
class NodeKey:
    """One SuperNode's key pair: the private half stays on the node, the public half is
    registered with the SuperLink."""

    private: Path
    public: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _subject_alternative_names(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_tls(directory: Path, hosts: list[str]) -> TlsFiles:
    """A new CA and a SuperLink certificate it signed, valid for each of `hosts` (names
    or IP addresses the SuperNodes and the CLI use to reach the SuperLink)."""
    if not hosts:
        raise ValueError("a certificate needs at least one host name or address")
    now = dt.datetime.now(dt.UTC)
    valid = {
        "not_valid_before": now - dt.timedelta(minutes=5),
        "not_valid_after": now + dt.timedelta(days=VALID_DAYS),
    }
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("fedmc-flwr deployment CA")
    ca = (
        x509.CertificateBuilder(**valid)
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder(**valid)
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(_subject_alternative_names(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.crt", directory / "superlink.crt", directory / "superlink.key")
    files.ca_certificate.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return files


def make_node_key(directory: Path, name: str) -> NodeKey:
    """A SuperNode key pair in OpenSSH format, as `flower-supernode` and `flwr supernode
    register` read them."""
    key = ec.generate_private_key(NODE_CURVE)
    pair = NodeKey(directory / f"{name}.key", directory / f"{name}.pub")
    _write_private(
        pair.private,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    pair.public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + b"\n"
    )
    return pair
