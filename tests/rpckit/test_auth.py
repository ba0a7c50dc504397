"""rpckit.auth over a real gRPC server on 127.0.0.1: the token on every call but health, TLS
with a CA made at test time, and the helpers that read tokens and flags."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rpckit import auth
from rpckit.errors import Reason, reason_of
from rpckit.server import build_server
from rpckit.settings import FlagParser, describe
from cluster.certs import make_tls_files

TOKEN = "s3cret-token_42"
METHOD = "/test.Echo/Echo"


class Echo:
    """A unary method that counts the calls that reached it."""

    def __init__(self):
        self.calls = 0

    def echo(self, request: bytes, context) -> bytes:
        self.calls += 1
        return request

    def add(self, _servicer, server: grpc.Server) -> None:
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "test.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(self.echo)})])


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _serve(echo: Echo, token: str = "", credentials=None):
    server, port, _ = build_server("127.0.0.1", 0, 4, [(echo.add, None)], ["test.Echo"],
                                   interceptors=auth.server_interceptors(token),
                                   credentials=credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


def _call(channel: grpc.Channel, payload: bytes = b"hi") -> bytes:
    return channel.unary_unary(METHOD)(payload, timeout=5)


@pytest.fixture
def token_server():
    echo = Echo()
    server, address = _serve(echo, TOKEN)
    yield echo, address
    server.stop(0)


@pytest.mark.parametrize("token", [None, "wrong-token", TOKEN + "x", TOKEN[:-1]])
def test_a_missing_or_wrong_token_is_unauthenticated_and_reaches_nothing(token_server, token):
    echo, address = token_server
    with auth.channel(address, token=token) as ch:
        with pytest.raises(grpc.RpcError) as err:
            _call(ch)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(err.value) == Reason.UNAUTHENTICATED
    assert TOKEN not in (err.value.details() or "")
    assert echo.calls == 0


def test_the_right_token_gets_in(token_server):
    echo, address = token_server
    with auth.channel(address, token=TOKEN) as ch:
        assert _call(ch, b"payload") == b"payload"
    assert echo.calls == 1


def test_a_token_in_another_header_or_scheme_is_refused(token_server):
    echo, address = token_server
    with grpc.insecure_channel(address) as ch:
        for metadata in ([("authorization", TOKEN)], [("authorization", "Basic " + TOKEN)],
                         [("x-token", "Bearer " + TOKEN)]):
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary(METHOD)(b"x", timeout=5, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert echo.calls == 0


def test_health_needs_no_token_but_reflection_does(token_server):
    _, address = token_server
    with auth.channel(address) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        with pytest.raises(grpc.RpcError) as err:  # a streaming method is refused too
            list(stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with auth.channel(address, token=TOKEN) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        replies = list(stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
        names = {s.name for s in replies[0].list_services_response.service}
        assert "test.Echo" in names


def test_no_token_configured_lets_every_call_in():
    echo = Echo()
    server, address = _serve(echo)
    try:
        with auth.channel(address) as ch:
            assert _call(ch) == b"hi"
    finally:
        server.stop(0)


def test_tls_with_the_right_ca_works_and_plaintext_or_another_ca_fails(tls, tmp_path):
    echo = Echo()
    server, address = _serve(echo, TOKEN, auth.server_credentials(tls.cert, tls.key))
    other = make_tls_files(tmp_path / "other", "another CA")
    try:
        with auth.channel(address, tls_ca=tls.ca, token=TOKEN) as ch:
            assert _call(ch, b"secure") == b"secure"
        for kw in ({}, {"tls_ca": other.ca}):  # plaintext; a CA that did not sign the cert
            with auth.channel(address, token=TOKEN, **kw) as ch:
                with pytest.raises(grpc.RpcError) as err:
                    _call(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with auth.channel(address, tls_ca=tls.ca) as ch:  # TLS is no substitute for the token
            with pytest.raises(grpc.RpcError) as err:
                _call(ch)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop(0)
    assert echo.calls == 1


def test_read_token_from_a_flag_or_a_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert auth.read_token(token_file=str(path)) == TOKEN
    assert auth.read_token(TOKEN) == TOKEN
    assert auth.read_token() == ""
    for bad in ("has space", "tab\there", "nul\x00", "é", "x" * 5000):
        with pytest.raises(auth.SecurityConfigError) as err:
            auth.read_token(bad)
        assert bad not in str(err.value)
    with pytest.raises(auth.SecurityConfigError):
        auth.read_token(TOKEN, str(path))
    with pytest.raises(auth.SecurityConfigError):
        auth.read_token(token_file=str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(auth.SecurityConfigError):
        auth.read_token(token_file=str(tmp_path / "empty"))


def test_client_options_read_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(auth.ENV_TLS_CA, "/some/ca.pem")
    monkeypatch.setenv(auth.ENV_TOKEN, TOKEN)
    assert auth.client_options() == ("/some/ca.pem", TOKEN)
    assert auth.client_options("", "given") == ("", "given")  # what a caller gives wins
    monkeypatch.delenv(auth.ENV_TOKEN)
    path = tmp_path / "token"
    path.write_text("from-file")
    monkeypatch.setenv(auth.ENV_TOKEN_FILE, str(path))
    assert auth.client_options()[1] == "from-file"


def test_flags_and_the_startup_line_never_show_the_token(monkeypatch, tmp_path):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class S:
        tls_cert: str = ""
        tls_key: str = ""
        tls_ca: str = ""
        auth_token: str = ""
        auth_token_file: str = ""

    monkeypatch.setenv("ELASTIC_PS_AUTH_TOKEN", TOKEN)
    p = FlagParser("x", "test")
    auth.add_flags(p, server=True, client=True)
    s = p.settings(S, [])
    assert s.auth_token == TOKEN
    assert TOKEN not in describe(s, redact=auth.SECRET_FIELDS)
    assert auth.flag_problems(s) == []
    half = S(tls_cert=str(tmp_path / "c.pem"))
    assert any("go together" in p for p in auth.flag_problems(half))
    assert any("not a readable file" in p for p in auth.flag_problems(half))
