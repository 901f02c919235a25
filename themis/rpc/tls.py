"""TLS for the agents' endpoint (docs/yarn.md, "Security"): PEM files named in yarn-site.xml.

* the server (the RM's engine): a certificate chain and its private key,
  ``yarn.resourcemanager.themis.agent-tls.cert-file`` / ``.key-file``;
* the clients (application masters): the CA certificate(s) they trust,
  ``yarn.resourcemanager.themis.agent-tls.trust-file`` (by default the server certificate
  itself, for a self-signed one).

Every problem with a file (missing, unreadable, not PEM) is a :class:`TlsError` naming the
file and the setting it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

CERT_KEY = "yarn.resourcemanager.themis.agent-tls.cert-file"
KEY_KEY = "yarn.resourcemanager.themis.agent-tls.key-file"
TRUST_KEY = "yarn.resourcemanager.themis.agent-tls.trust-file"
ENABLED_KEY = "yarn.resourcemanager.themis.agent-tls.enabled"
MAX_PEM = 1 << 20  # bytes of one PEM file


class TlsError(ValueError):
    """A TLS file that cannot be used (names the file and the setting)."""


def read_pem(path: str, setting: str, marker: bytes = b"-----BEGIN ") -> bytes:
    """The bytes of a PEM file, checked to hold at least one PEM block."""
    if not path:
        raise TlsError(f"{setting} is not set (TLS is on; set "
                       f"{ENABLED_KEY}=false to serve plaintext gRPC)")
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_PEM:
            raise TlsError(f"{setting}: {path}: {size} bytes (at most {MAX_PEM})")
        data = p.read_bytes()
    except FileNotFoundError:
        raise TlsError(f"{setting}: {path}: no such file") from None
    except OSError as exc:
        raise TlsError(f"{setting}: {path}: cannot read: {exc.strerror or exc}") from None
    if marker not in data:
        raise TlsError(f"{setting}: {path}: not a PEM file (no '{marker.decode()}' line)")
    return data


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's certificate chain and private key (PEM paths)."""

    cert_file: str
    key_file: str

    def credentials(self) -> grpc.ServerCredentials:
        cert = read_pem(self.cert_file, CERT_KEY, b"-----BEGIN CERTIFICATE")
        key = read_pem(self.key_file, KEY_KEY, b"PRIVATE KEY-----")
        return grpc.ssl_server_credentials([(key, cert)])


def channel_credentials(trust_file: str) -> grpc.ChannelCredentials:
    """Client credentials trusting the CA certificate(s) in ``trust_file``."""
    return grpc.ssl_channel_credentials(
        read_pem(trust_file, TRUST_KEY, b"-----BEGIN CERTIFICATE"))
