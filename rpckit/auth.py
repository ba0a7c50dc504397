"""Who may talk to a server: TLS for gRPC, and one shared bearer token on every call.

Servers: `server_credentials(cert, key)` serves gRPC over TLS; `TokenInterceptor(token)` makes
every call except the health service carry the metadata `authorization: Bearer <token>`, and
answers any other call UNAUTHENTICATED (reason UNAUTHENTICATED) before its request is even
decoded, so a refused call changes nothing. Clients: `channel(address, tls_ca=, token=)` makes
a plaintext or TLS channel that attaches the token to every call. The ZeroMQ data plane
checks the same token with `token_matches` (see ps/dataplane/).

The token is a secret: it is compared in constant time, and no message, log line or
settings line repeats it (describe the settings with `redact=SECRET_FIELDS`).

Flags (`add_flags`): `--tls-cert FILE --tls-key FILE` (servers), `--tls-ca FILE` (clients),
`--auth-token TOKEN` or `--auth-token-file FILE` (both); each also reads its ELASTIC_PS_*
variable. The SDK reads the same variables (`client_options`).
"""
from __future__ import annotations

import collections
import hmac
import os
import re
from typing import NamedTuple, Sequence

import grpc

from .errors import Reason, ServiceError, to_status

HEALTH_PREFIX = "/grpc.health.v1.Health/"  # load balancers and supervisors probe unauthenticated
HEADER = "authorization"
SCHEME = "Bearer "
MAX_TOKEN_CHARS = 4096
SECRET_FIELDS = ("auth_token",)
ENV_TLS_CA = "ELASTIC_PS_TLS_CA"
ENV_TOKEN = "ELASTIC_PS_AUTH_TOKEN"
ENV_TOKEN_FILE = "ELASTIC_PS_AUTH_TOKEN_FILE"
# A ZeroMQ CURVE public key as the data plane publishes it: 32 bytes in Z85, 40 characters.
_CURVE_KEY = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")


class SecurityConfigError(ValueError):
    """A certificate, key or token that cannot be used (the message never holds the token)."""


# ---- the token --------------------------------------------------------------------------------


def check_token(token: str) -> str:
    """The token if it can travel in a gRPC header: 1-4096 visible ASCII characters."""
    if not token:
        raise SecurityConfigError("the auth token is empty")
    if len(token) > MAX_TOKEN_CHARS:
        raise SecurityConfigError(f"the auth token has {len(token)} characters; at most "
                                  f"{MAX_TOKEN_CHARS}")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise SecurityConfigError("the auth token must be visible ASCII characters only (no "
                                  "spaces, control characters or non-ASCII)")
    return token


def read_token(token: str = "", token_file: str = "") -> str:
    """The token from `token`, else the first line of `token_file` (surrounding whitespace
    dropped); '' when neither is given. Both given is an error: which one wins would be a
    guess."""
    if token and token_file:
        raise SecurityConfigError("give --auth-token or --auth-token-file, not both")
    if token_file:
        try:
            with open(token_file, encoding="ascii") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SecurityConfigError(f"cannot read the auth token file {token_file}: "
                                      f"{exc.__class__.__name__}") from None
        if not token:
            raise SecurityConfigError(f"the auth token file {token_file} is empty")
    return check_token(token) if token else ""


def token_matches(given: str | bytes, expected: str) -> bool:
    """Whether `given` is the token, in time that does not depend on where they differ."""
    if isinstance(given, str):
        given = given.encode("utf-8", "replace")
    return hmac.compare_digest(given, expected.encode("ascii"))


def is_curve_key(text: str) -> bool:
    """Whether `text` is a Z85 CURVE public key (40 characters)."""
    return bool(_CURVE_KEY.fullmatch(text))


# ---- servers ----------------------------------------------------------------------------------


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read the {what} {path}: {exc.strerror}") from None


def server_credentials(cert_file: str, key_file: str) -> grpc.ServerCredentials | None:
    """TLS credentials from a PEM certificate (chain) and its key; None when neither is given."""
    if not cert_file and not key_file:
        return None
    if not (cert_file and key_file):
        raise SecurityConfigError("--tls-cert and --tls-key go together")
    return grpc.ssl_server_credentials([(_read(key_file, "TLS key"),
                                         _read(cert_file, "TLS certificate"))])


def unauthenticated(why: str) -> ServiceError:
    return ServiceError("UNAUTHENTICATED", Reason.UNAUTHENTICATED,
                        f"{why}: send the job's token (--auth-token, --auth-token-file or "
                        f"{ENV_TOKEN})")


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call but health without `authorization: Bearer <token>`.

    A refused call never reaches its servicer: the handler put in its place aborts without
    decoding the request."""

    def __init__(self, token: str):
        self._expected = SCHEME + check_token(token)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(HEALTH_PREFIX):
            return continuation(handler_call_details)
        given = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == HEADER:
                given = value
                break
        if given is not None and token_matches(given, self._expected):
            return continuation(handler_call_details)
        err = unauthenticated("no auth token" if given is None else "wrong auth token")
        return _refusal(continuation(handler_call_details), err)


def _refusal(handler, err: ServiceError):
    """A handler of the same kind as `handler` (unary or streaming) that only aborts."""

    def refuse(_request, context):
        context.abort_with_status(to_status(err))

    if handler is not None and handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def server_interceptors(token: str) -> list[grpc.ServerInterceptor]:
    return [TokenInterceptor(token)] if token else []


# ---- clients ----------------------------------------------------------------------------------


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call of a channel."""

    def __init__(self, token: str):
        self._pair = (HEADER, SCHEME + check_token(token))

    def _details(self, details) -> "_Details":
        return _Details(details.method, details.timeout, [*(details.metadata or ()), self._pair],
                        details.credentials, getattr(details, "wait_for_ready", None),
                        getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata",
                                                   "credentials", "wait_for_ready",
                                                   "compression")),
               grpc.ClientCallDetails):
    pass


def channel(address: str, *, tls_ca: str | None = None, token: str | None = None,
            options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    """A channel to `address`: TLS verified against the PEM CA file `tls_ca` when given (else
    plaintext), the token attached to every call when given."""
    if tls_ca:
        creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca, "TLS CA"))
        ch = grpc.secure_channel(address, creds, options=list(options))
    else:
        ch = grpc.insecure_channel(address, options=list(options))
    return grpc.intercept_channel(ch, _BearerToken(token)) if token else ch


class ClientSecurity(NamedTuple):
    tls_ca: str
    token: str
    token_source: str  # where the token came from, for messages ('' when none was given)


def client_security(tls_ca: str | None = None, token: str | None = None,
                    token_file: str | None = None, *, flags: bool = False) -> ClientSecurity:
    """A client's CA and token: what it was given, else ELASTIC_PS_TLS_CA and
    ELASTIC_PS_AUTH_TOKEN / ELASTIC_PS_AUTH_TOKEN_FILE ('' for none), and where the token came
    from, named as the caller knows it: `flags` (a command line: --auth-token) or the SDK's
    keyword (auth_token=). The source names a file, never the token."""
    ca = tls_ca if tls_ca is not None else os.environ.get(ENV_TLS_CA, "")
    given, given_file = ("--auth-token", "--auth-token-file") if flags else (
        "auth_token=", "auth_token_file=")
    if token is None and token_file is None:
        token, token_file = os.environ.get(ENV_TOKEN, ""), os.environ.get(ENV_TOKEN_FILE, "")
        if token and token_file:
            token_file = ""  # the variable holding the token itself wins
        given, given_file = ENV_TOKEN, ENV_TOKEN_FILE
    source = (given if token else f"{given_file} {token_file}" if token_file else "")
    return ClientSecurity(ca, read_token(token or "", token_file or ""), source)


def client_options(tls_ca: str | None = None, token: str | None = None,
                   token_file: str | None = None) -> tuple[str, str]:
    """(tls_ca, token) of `client_security`."""
    security = client_security(tls_ca, token, token_file)
    return security.tls_ca, security.token


def settings_token_source(settings) -> str:
    """Where a server binary's own token came from (its settings merge flag and variable)."""
    if getattr(settings, "auth_token_file", ""):
        return f"--auth-token-file {settings.auth_token_file} (or {ENV_TOKEN_FILE})"
    return f"--auth-token (or {ENV_TOKEN})" if getattr(settings, "auth_token", "") else ""


class CredentialsRefused(ServiceError):
    """A server refused this process's token (UNAUTHENTICATED) or its rights
    (PERMISSION_DENIED). Never retried: the same credentials would get the same answer."""


def credentials_refused(server: str, code: str, token_source: str,
                        reason: str = "") -> CredentialsRefused:
    """The error every client raises at the first refusal of its credentials by `server`
    ("the master at host:port", "PS 0 at tcp://..."), naming where its token came from."""
    if code == "PERMISSION_DENIED":
        why = (f"{server} denied this call (PERMISSION_DENIED) to the token from "
               f"{token_source or 'nowhere (none was given)'}: use a token allowed to make it")
    elif token_source:
        why = (f"{server} refused the auth token from {token_source} (UNAUTHENTICATED): it is "
               "not the job's token. Give every process of the job the same token")
    else:
        why = (f"{server} requires the job's auth token (UNAUTHENTICATED) and this process sent "
               f"none: set {ENV_TOKEN_FILE} or {ENV_TOKEN} (flags --auth-token-file, "
               "--auth-token; auth_token= in the SDK)")
    return CredentialsRefused(code, reason or code, why + "; not retried")


# ---- flags ------------------------------------------------------------------------------------


def add_flags(parser, *, server: bool, client: bool) -> None:
    """The security flags on a rpckit.settings.FlagParser: the settings dataclass needs the
    fields tls_cert, tls_key (server), tls_ca (client), auth_token, auth_token_file."""
    if server:
        parser.flag("--tls-cert", "", "serve gRPC over TLS with this PEM certificate (chain); "
                    "with --tls-key. The PS then also encrypts its data plane (CURVE)")
        parser.flag("--tls-key", "", "the PEM private key of --tls-cert")
    if client:
        parser.flag("--tls-ca", "", "PEM CA certificate(s) to verify the servers this process "
                    "calls (TLS); unset: plaintext")
    parser.flag("--auth-token", "", "the job's shared secret: required on every call but "
                "health, and sent on every call this process makes (prefer "
                f"--auth-token-file or {ENV_TOKEN}: a flag shows in ps)")
    parser.flag("--auth-token-file", "", "read the auth token from the first line of this file")


def flag_problems(settings) -> list[str]:
    """What is wrong with the security settings (files unreadable, half a TLS pair, a bad
    token), for FlagParser.settings' check. Never repeats the token."""
    problems = []
    try:
        read_token(settings.auth_token, settings.auth_token_file)
    except SecurityConfigError as exc:
        problems.append(str(exc))
    cert, key = getattr(settings, "tls_cert", ""), getattr(settings, "tls_key", "")
    if bool(cert) != bool(key):
        problems.append("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key),
                       ("--tls-ca", getattr(settings, "tls_ca", ""))):
        if path and not os.access(path, os.R_OK):
            problems.append(f"{flag} {path} is not a readable file")
    return problems
