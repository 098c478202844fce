"""TLS for the Data API listener: TLS 1.2 or newer only; a self-signed certificate is made in
the data directory when none is configured."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from .config import Settings

__all__ = ["ensure_certificate", "server_ssl_context"]

log = logging.getLogger("payplane.tls")


def ensure_certificate(settings: Settings) -> tuple[Path, Path, bool]:
    """The (certificate, key) files to serve; creates a self-signed pair on first use.

    Returns the paths and whether a new certificate was made.
    """
    if settings.tls_cert_file and settings.tls_key_file:
        return settings.tls_cert_file, settings.tls_key_file, False
    directory = settings.data_dir / "tls"
    cert_path, key_path = directory / "data-api.crt", directory / "data-api.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path, False
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Payplane Data API (self-signed)")])
    now = dt.datetime.now(dt.UTC)
    hosts = {"localhost", settings.data_api_host or settings.host}
    alt_names: list[x509.GeneralName] = []
    for host in sorted(hosts):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    if not any(isinstance(n, x509.IPAddress) for n in alt_names):
        alt_names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path, True


def server_ssl_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context that refuses TLS 1.0 and 1.1 at the handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    return context
