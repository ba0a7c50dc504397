"""The data plane's token and CURVE encryption, over real ZeroMQ sockets on 127.0.0.1: a
request without the token, or with another, is UNAUTHENTICATED and applies nothing; a CURVE
PS answers only clients that use its public key."""
from __future__ import annotations

import pytest
import torch
import zmq

from protos import ps_pb2
from ps.dataplane import data_plane
from pswire.tables import TableSpec
from ps.store.params import ParamStore
from rpckit.errors import Reason, ServiceError
from worker_sdk.ps.data_client import DataClient, PSUnavailable

TOKEN = "data-plane-token"
TABLE = TableSpec("emb", 4, "normal", 0.0, 0.1, seed=1)
MODEL = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}


@pytest.fixture
def plane():
    """`plane(curve=bool)`: an in-process PS requiring TOKEN, with CURVE when asked; its
    store is `plane.stores[p]`."""
    started = []
    stores = {}  # plane -> the store it serves

    def make(curve: bool = False):
        keys = zmq.curve_keypair() if curve else None
        store = ParamStore()
        p = data_plane(store, host="127.0.0.1", port=0, threads=2,
                       max_frame_bytes=1 << 20, token=TOKEN, curve_keypair=keys)
        stores[p] = store
        endpoint = f"tcp://127.0.0.1:{p.bind()}"
        p.start()
        started.append(p)
        return p, endpoint, keys[0].decode() if keys else ""

    make.stores = stores
    yield make
    for p in started:
        p.stop()


def _client(endpoint: str, key: str = "", token: str = "", **kw) -> DataClient:
    kw.setdefault("timeout_s", 5.0)
    return DataClient([endpoint], server_keys=[key], auth_token=token, tls_ca="",
                      same_host=False, **kw)


def _refused(call) -> ServiceError:
    with pytest.raises(ServiceError) as err:
        call()
    assert err.value.code == "UNAUTHENTICATED" and err.value.reason == Reason.UNAUTHENTICATED
    assert TOKEN not in err.value.message
    return err.value


@pytest.mark.parametrize("curve", [False, True])
@pytest.mark.parametrize("bad", ["", "wrong-token", TOKEN[:-1]])
def test_no_or_a_wrong_token_applies_nothing(plane, curve, bad):
    p, endpoint, key = plane(curve)
    store = plane.stores[p]
    with _client(endpoint, key, bad) as c:
        _refused(lambda: c.init_parameters(MODEL, "sgd", lr=1.0, tables=[TABLE]))
    assert not store.initialized and not store.dense and not store.tables

    with _client(endpoint, key, TOKEN) as good:
        assert good.init_parameters(MODEL, "sgd", lr=1.0, tables=[TABLE])
        before = {n: t.clone() for n, t in good.pull().items()}
        rows_before = good.pull_rows("emb", torch.arange(3)).clone()
    pushes = store.stats.pushes
    with _client(endpoint, key, bad) as c:
        c.set_layout({n: t.numel() * 4 for n, t in MODEL.items()})
        _refused(lambda: c.push({n: torch.ones_like(t) for n, t in MODEL.items()}))
        _refused(lambda: c.pull())
        _refused(lambda: c.pull_rows("emb", torch.arange(100, 200)))  # would create rows
        _refused(lambda: c.push_rows("emb", torch.arange(3), torch.ones(3, 4)))
    assert store.stats.pushes == pushes and len(store.tables["emb"]) == 3
    with _client(endpoint, key, TOKEN) as good:
        after = good.pull()
        assert all(torch.equal(after[n], before[n]) for n in before)
        assert torch.equal(good.pull_rows("emb", torch.arange(3)), rows_before)
        good.push({n: torch.ones_like(t) for n, t in MODEL.items()})  # the token gets in
        assert torch.equal(good.pull(["b"])["b"], before["b"] - 1)


def test_a_raw_request_without_a_token_is_answered_unauthenticated(plane):
    p, endpoint, _ = plane()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        req = ps_pb2.DataRequest(client_id="x", seq=7, pull=ps_pb2.Pull())
        sock.send_multipart([req.SerializeToString()])
        assert sock.poll(5000)
        resp = ps_pb2.DataResponse.FromString(sock.recv_multipart()[0])
        assert resp.code == ps_pb2.DataResponse.UNAUTHENTICATED and resp.seq == 7
        assert resp.reason == Reason.UNAUTHENTICATED and not resp.HasField("pull")
    finally:
        sock.close(0)
        ctx.term()


def test_a_curve_ps_answers_only_clients_with_its_key(plane):
    _, endpoint, key = plane(curve=True)
    with _client(endpoint, key, TOKEN) as c:
        assert c.init_parameters(MODEL, "sgd", lr=1.0)
        assert torch.equal(c.pull(["w"])["w"], MODEL["w"])
    other = zmq.curve_keypair()[0].decode()
    for server_key in ("", other):  # plaintext; another server's key
        with _client(endpoint, server_key, TOKEN, timeout_s=0.3, max_attempts=2,
                     backoff_s=0.01) as c:
            c.set_layout({n: t.numel() * 4 for n, t in MODEL.items()})
            with pytest.raises(PSUnavailable):
                c.pull(["w"])


def test_a_plaintext_ps_without_a_token_still_serves_anyone(inproc_ps):
    ps = inproc_ps()
    with DataClient([ps.endpoint], auth_token="ignored-by-an-open-ps", tls_ca="",
                    timeout_s=5) as c:
        assert c.init_parameters(MODEL, "sgd", lr=1.0)
