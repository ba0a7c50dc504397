"""TLS certificates made at run time, for tests and benchmarks (never committed): a CA and a
server certificate it signed for 127.0.0.1 / localhost, written as PEM files into a directory.
Needs the `cryptography` package (a dev dependency)."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TLSFiles:
    ca: str    # the CA certificate clients verify against
    cert: str  # the server's certificate, signed by the CA
    key: str   # its private key

    def server_flags(self, token_file: str | Path) -> tuple[str, ...]:
        """A master's or PS's flags to serve with these files and the token in `token_file`
        (and to reach the other servers, signed by the same CA)."""
        return ("--tls-cert", self.cert, "--tls-key", self.key, "--tls-ca", self.ca,
                "--auth-token-file", str(token_file))


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_tls_files(directory: Path, ca_name: str = "elastic-ps test CA",
                   hosts: Sequence[str] = ("localhost", "127.0.0.1")) -> TLSFiles:
    """A fresh CA and a server certificate for `hosts` (names or IP addresses), valid for a
    day."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = TLSFiles(ca=str(directory / "ca.pem"), cert=str(directory / "server.pem"),
                     key=str(directory / "server.key"))
    Path(files.ca).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    Path(files.cert).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(files.key).write_bytes(_pem_key(key))
    Path(files.key).chmod(0o600)
    return files
