"""Refusals no retry can mend, over real gRPC servers on 127.0.0.1: a refused token raises at
once naming where the token came from, and a TLS mismatch raises a message naming --tls-ca /
ELASTIC_PS_TLS_CA (plaintext against TLS, TLS against plaintext, another CA, a certificate
that does not name the host dialled)."""
from __future__ import annotations

import time

import grpc
import pytest

from cluster.certs import make_tls_files
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit import auth, tls_check
from rpckit.channels import LeaderStub
from rpckit.errors import Reason
from rpckit.server import build_server

TOKEN = "job-token-1234"


class Leader(pb_grpc.MasterServicer):
    calls = 0

    def GetStatus(self, request, context):
        Leader.calls += 1
        return pb.GetStatusResponse(time_ms=7)


def _serve(token: str = "", files=None):
    credentials = auth.server_credentials(files.cert, files.key) if files else None
    server, port, _ = build_server("127.0.0.1", 0, 2,
                                   [(pb_grpc.add_MasterServicer_to_server, Leader())], [],
                                   interceptors=auth.server_interceptors(token),
                                   credentials=credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    return {"good": make_tls_files(root / "good"),
            "other": make_tls_files(root / "other", "another CA"),
            "elsewhere": make_tls_files(root / "elsewhere", hosts=["elsewhere.example"])}


def _status(address: str, **kw):
    stub = LeaderStub(address, pb_grpc.MasterStub, **kw)
    try:
        return stub.GetStatus(pb.GetStatusRequest(), timeout=5)
    finally:
        stub.close()


@pytest.mark.parametrize("given, source", [
    ({"token": "wrong-token"}, "--auth-token"),
    ({"token_file": "FILE"}, "--auth-token-file"),
    ({"env": "wrong-token"}, "ELASTIC_PS_AUTH_TOKEN"),
])
def test_a_wrong_token_raises_at_once_naming_its_source(given, source, monkeypatch, tmp_path):
    monkeypatch.delenv(auth.ENV_TOKEN, raising=False)
    monkeypatch.delenv(auth.ENV_TOKEN_FILE, raising=False)
    if "env" in given:
        monkeypatch.setenv(auth.ENV_TOKEN, given["env"])
        given = {}
    if given.get("token_file") == "FILE":
        path = tmp_path / "token"
        path.write_text("wrong-token\n")
        given = {"token_file": str(path)}
    security = auth.client_security(flags=True, **given)
    assert security.token_source.startswith(source)
    server, address = _serve(TOKEN)
    try:
        started, before = time.monotonic(), Leader.calls
        with pytest.raises(auth.CredentialsRefused) as err:
            _status(address, token=security.token, token_source=security.token_source)
        assert time.monotonic() - started < 2  # not retried
        assert Leader.calls == before
        assert err.value.code == "UNAUTHENTICATED" and err.value.reason == Reason.UNAUTHENTICATED
        assert source in err.value.message and "not retried" in err.value.message
        assert "wrong-token" not in err.value.message  # never the token itself
        assert _status(address, token=TOKEN).time_ms == 7
    finally:
        server.stop(0)


def test_no_token_names_the_variables_to_set(monkeypatch):
    monkeypatch.delenv(auth.ENV_TOKEN, raising=False)
    monkeypatch.delenv(auth.ENV_TOKEN_FILE, raising=False)
    assert auth.client_security().token_source == ""
    server, address = _serve(TOKEN)
    try:
        with pytest.raises(auth.CredentialsRefused) as err:
            _status(address)
        assert "ELASTIC_PS_AUTH_TOKEN_FILE" in err.value.message
        assert "sent none" in err.value.message
    finally:
        server.stop(0)


def test_the_sdk_names_its_keyword_and_the_variables(monkeypatch, tmp_path):
    monkeypatch.setenv(auth.ENV_TOKEN, "from-env")
    assert auth.client_security(token="x").token_source == "auth_token="
    assert auth.client_security().token_source == "ELASTIC_PS_AUTH_TOKEN"
    monkeypatch.delenv(auth.ENV_TOKEN)
    path = tmp_path / "t"
    path.write_text("from-file\n")
    monkeypatch.setenv(auth.ENV_TOKEN_FILE, str(path))
    assert auth.client_security().token_source == f"ELASTIC_PS_AUTH_TOKEN_FILE {path}"


CA_FIX = ("--tls-ca", "ELASTIC_PS_TLS_CA")


@pytest.mark.parametrize("server_cert, client_ca, says, fix", [
    ("good", "", "serves TLS and this client speaks plaintext", CA_FIX),
    ("good", "other", "is not signed by the CA this client trusts", CA_FIX),
    ("elsewhere", "elsewhere", "does not name 127.0.0.1", ("subject alternative names",
                                                             "--advertise-host")),
    (None, "good", "does not complete a TLS handshake", CA_FIX + ("--tls-cert",)),
])
def test_a_tls_mismatch_names_the_flag_and_the_variable(certs, server_cert, client_ca, says,
                                                        fix):
    server, address = _serve(files=certs[server_cert] if server_cert else None)
    try:
        started = time.monotonic()
        with pytest.raises(tls_check.TLSMismatch) as err:
            _status(address, tls_ca=certs[client_ca].ca if client_ca else "")
        assert time.monotonic() - started < 5
        assert err.value.reason == Reason.TLS_MISMATCH and says in err.value.message
        assert all(word in err.value.message for word in fix), err.value.message
    finally:
        server.stop(0)


def test_matching_tls_works_and_a_server_that_is_down_is_no_tls_problem(certs):
    server, address = _serve(files=certs["good"])
    try:
        assert _status(address, tls_ca=certs["good"].ca).time_ms == 7
        assert tls_check.probe(address, certs["good"].ca) is None
    finally:
        server.stop(0)
    with pytest.raises(grpc.RpcError) as err:  # down: retryable, the caller's budget decides
        _status("127.0.0.1:1", tls_ca=certs["good"].ca)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_transport_failure_is_probed_at_most_every_few_seconds(monkeypatch):
    probed = []
    monkeypatch.setattr(tls_check, "probe", lambda *a, **k: probed.append(a))
    stub = LeaderStub("127.0.0.1:1", pb_grpc.MasterStub, clock=lambda: 0.0)
    try:
        for _ in range(3):  # a transport failure: probed once per PROBE_EVERY_S
            with pytest.raises(grpc.RpcError):
                stub.GetStatus(pb.GetStatusRequest(), timeout=1)
    finally:
        stub.close()
    assert len(probed) == 1
