"""Why a TLS connection cannot be made, in words that name the fix.

gRPC reports a failed handshake as UNAVAILABLE ("failed to connect to all addresses"), exactly as
it reports a server that is down, so a client retrying it would wait out its whole budget and
then say nothing useful. When a call fails like that (no reason from our servers: the transport
failed), `probe` makes one handshake of its own with Python's `ssl`, as the client's channel
would (same CA, same host name, ALPN h2), and reads the outcome from the exception's type and
OpenSSL verify code, never from message text:

- the client has no CA and the server completes a TLS handshake: the server serves TLS;
- the client has a CA and the server does not complete one: the server serves plaintext;
- the certificate does not chain to the client's CA, does not name the host dialled, or is out
  of its validity period.

Each is a `TLSMismatch` (UNAVAILABLE, reason TLS_MISMATCH) whose message names the flag or
variable to set. A port that does not accept TCP, or a handshake that times out, is not a TLS
problem: `probe` answers None and the caller retries as before.
"""
from __future__ import annotations

import socket
import ssl

from .errors import Reason, ServiceError

CA_HINT = "--tls-ca FILE (env ELASTIC_PS_TLS_CA; tls_ca= in the SDK)"
RECIPE = "docs/operations.md, 'Certificates'"
PROBE_TIMEOUT_S = 1.0
# OpenSSL's X509_V_ERR_* codes (ssl.SSLCertVerificationError.verify_code) this module explains
_NOT_YET_VALID, _EXPIRED = 9, 10
_HOST_MISMATCH = frozenset({62, 64})  # a DNS name / an IP address the certificate does not hold


class TLSMismatch(ServiceError):
    """Client and server disagree on TLS; retrying cannot help."""

    def __init__(self, message: str):
        super().__init__("UNAVAILABLE", Reason.TLS_MISMATCH, message)


def split_address(address: str) -> tuple[str, int] | None:
    """'host:port' or '[v6]:port' -> (host, port); None for anything else (a gRPC URI)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host or "/" in host:
        return None
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host, int(port)


def probe(address: str, tls_ca: str = "", timeout_s: float = PROBE_TIMEOUT_S,
          server: str = "") -> TLSMismatch | None:
    """What is wrong with TLS between this client (`tls_ca`: its CA file, '' for plaintext)
    and the server at `address`, or None when nothing is (or nothing can be told)."""
    parts = split_address(address)
    if parts is None:
        return None
    host, port = parts
    server = server or f"the server at {address}"
    try:
        if tls_ca:
            ctx = ssl.create_default_context(cafile=tls_ca)
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except (OSError, ValueError):
        return None  # down, unresolvable, or an unreadable CA (the flag check says so)
    try:
        with ctx.wrap_socket(sock, server_hostname=host):
            pass
    except ssl.SSLCertVerificationError as exc:
        return _certificate_problem(server, host, tls_ca, exc.verify_code)
    except (socket.timeout, TimeoutError):
        return None  # slow, not wrong
    except (ssl.SSLError, ConnectionError, OSError):
        if not tls_ca:
            return None  # no TLS on either side: whatever failed, it is not TLS
        return TLSMismatch(
            f"{server} does not complete a TLS handshake (it serves plaintext?) while this "
            f"client uses TLS with the CA {tls_ca}: unset {CA_HINT}, or start the server "
            "with --tls-cert and --tls-key")
    finally:
        sock.close()
    if tls_ca:
        return None  # the handshake works: the call failed for another reason
    return TLSMismatch(
        f"{server} serves TLS and this client speaks plaintext: give the CA that signed the "
        f"server's certificate with {CA_HINT}")


def _certificate_problem(server: str, host: str, tls_ca: str, code: int) -> TLSMismatch:
    if code in _HOST_MISMATCH:
        return TLSMismatch(
            f"the TLS certificate of {server} does not name {host}, the host this client "
            f"dials: issue it with {host} among its subject alternative names ({RECIPE}), or "
            "dial a name it holds (the PS: --advertise-host)")
    if code in (_EXPIRED, _NOT_YET_VALID):
        when = "expired" if code == _EXPIRED else "not valid yet"
        return TLSMismatch(f"the TLS certificate of {server} is {when}: issue a new one "
                           f"({RECIPE})")
    return TLSMismatch(
        f"the TLS certificate of {server} is not signed by the CA this client trusts "
        f"({tls_ca}): give the CA that signed it with {CA_HINT}")
