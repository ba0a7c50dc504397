"""The PS's per-request bounds and its handler threads' resilience (issue 16), over real
ZeroMQ to an in-process data plane: every over-bound request is refused before it allocates
and changes nothing, and a failure inside a handler never stops the PS serving."""
from __future__ import annotations

import threading

import pytest
import torch
import zmq

from protos import ps_pb2
from ps.dataplane import data_plane
from pswire.tables import TableSpec
from ps.store.limits import Limits
from ps.store.params import ParamStore
from worker_sdk.ps.data_client import DataClient, PSError

CODE = ps_pb2.DataResponse.Code


def _raw(endpoint: str, *parts, sock: zmq.Socket | None = None, timeout_ms: int = 10_000):
    own = sock is None
    if own:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
    try:
        sock.send_multipart(list(parts))
        assert sock.poll(timeout_ms), "no answer"
        frames = sock.recv_multipart()
        return ps_pb2.DataResponse.FromString(frames[0]), frames[1:]
    finally:
        if own:
            sock.close(0)


def _req(**kw) -> bytes:
    return ps_pb2.DataRequest(client_id="raw", seq=1, **kw).SerializeToString()


def _ready(inproc_ps, **limits):
    ps = inproc_ps(ParamStore(limits=Limits(**limits)))
    with DataClient([ps.endpoint], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(30_000)}, "sgd", lr=1.0,
                          tables=[TableSpec("emb", 4), TableSpec("small", 4, num_embeddings=100)])
    return ps


def test_a_pull_naming_a_tensor_twice_is_refused_not_answered_twice(inproc_ps):
    ps = _ready(inproc_ps)
    resp, frames = _raw(ps.endpoint, _req(pull=ps_pb2.Pull(names=["w"] * 1000)))
    assert resp.code == CODE.INVALID_ARGUMENT and not frames
    assert "'w'" in resp.message and len(resp.message) < 200


def test_a_pull_naming_more_tensors_than_the_bound_is_too_large(inproc_ps):
    ps = _ready(inproc_ps, max_names=10)
    resp, _ = _raw(ps.endpoint, _req(pull=ps_pb2.Pull(names=[f"t{i}" for i in range(11)])))
    assert resp.code == CODE.RESOURCE_EXHAUSTED and resp.reason == "TOO_LARGE"
    assert "--max-request-names" in resp.message


def test_a_message_of_too_many_frames_is_refused_and_the_connection_keeps_working(inproc_ps):
    ps = _ready(inproc_ps, max_frames=50)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(ps.endpoint)
    try:
        resp, frames = _raw(ps.endpoint, _req(pull=ps_pb2.Pull()), *([b""] * 20_000), sock=sock)
        assert resp.code == CODE.RESOURCE_EXHAUSTED and resp.reason == "TOO_LARGE"
        assert "--max-request-frames" in resp.message and not frames
        # the refused message's other frames were dropped, not read as the next request
        resp, frames = _raw(ps.endpoint, _req(pull=ps_pb2.Pull(names=["w"])), sock=sock)
        assert resp.code == CODE.OK and len(frames) == 1
    finally:
        sock.close(0)


def test_pull_rows_creating_more_rows_than_the_bound_is_refused_and_creates_none(inproc_ps):
    ps = _ready(inproc_ps, max_new_rows=1000)
    with DataClient([ps.endpoint], timeout_s=5) as c:
        with pytest.raises(PSError) as err:
            c.pull_rows("emb", torch.arange(1_000_000))
        assert err.value.code == "RESOURCE_EXHAUSTED" and err.value.reason == "TOO_LARGE"
        with pytest.raises(PSError) as err:
            c.push_rows("emb", torch.arange(5000), torch.ones(5000, 4))
        assert err.value.reason == "TOO_LARGE"
        assert len(ps.store.tables["emb"]) == 0 and ps.store.tables["emb"].pushes == 0
        # repeats of one id count once, and rows that exist cost nothing against the bound
        assert c.pull_rows("emb", torch.zeros(5000, dtype=torch.int64)).shape == (5000, 4)
        c.pull_rows("emb", torch.arange(1000))
        assert c.pull_rows("emb", torch.arange(1500)).shape == (1500, 4)  # 500 new
        assert len(ps.store.tables["emb"]) == 1500


def test_num_embeddings_is_enforced_on_the_ps(inproc_ps):
    ps = _ready(inproc_ps)
    assert ps.store.tables["small"].spec.num_embeddings == 100
    with DataClient([ps.endpoint], timeout_s=5) as c:
        assert c.pull_rows("small", torch.tensor([0, 99])).shape == (2, 4)
        for bad in ([100], [5, 2**40]):
            with pytest.raises(PSError) as err:
                c.pull_rows("small", torch.tensor(bad))
            assert err.value.code == "INVALID_ARGUMENT" and "num_embeddings" in err.value.message
        with pytest.raises(PSError):
            c.push_rows("small", torch.tensor([100]), torch.ones(1, 4))
    assert len(ps.store.tables["small"]) == 2


def test_out_of_memory_in_a_handler_is_answered_and_the_thread_keeps_serving(
        inproc_ps, monkeypatch):
    ps = _ready(inproc_ps)
    real = ps.store.pull
    calls = []

    def pull(names, export):
        calls.append(names)
        if len(calls) <= 4:  # every handler thread meets one
            raise MemoryError()
        return real(names, export)

    monkeypatch.setattr(ps.store, "pull", pull)
    for _ in range(4):
        resp, _ = _raw(ps.endpoint, _req(pull=ps_pb2.Pull(names=["w"])))
        assert resp.code == CODE.RESOURCE_EXHAUSTED and resp.reason == "OUT_OF_MEMORY"
    with DataClient([ps.endpoint], timeout_s=5) as c:
        c.set_layout({"w": 1})
        assert c.pull(["w"])["w"].shape == (30_000,)
    assert not ps.plane.failed


class _Fatal(BaseException):
    """Stands for what no handler can answer (it escapes `except Exception`)."""


def test_a_handler_thread_that_dies_makes_the_ps_report_not_serving(monkeypatch):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ps.server import Identity, PSServicer, build_server, not_serving_on_failure

    store = ParamStore()
    server, grpc_port, health = build_server(PSServicer(store, None, Identity(0, 1)),
                                             "127.0.0.1", 0, 2)
    server.start()
    failures = []
    on_failure = not_serving_on_failure(health)
    plane = data_plane(store, host="127.0.0.1", port=0, threads=1,
                      on_failure=lambda why: (failures.append(why), on_failure(why)))
    port = plane.bind()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")

    def status() -> int:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="elasticps.v1.ParameterServer"), timeout=5).status

    died = threading.Event()

    def handle(parts):
        died.set()
        raise _Fatal()

    monkeypatch.setattr(plane, "handle", handle)
    plane.start()
    try:
        assert status() == health_pb2.HealthCheckResponse.SERVING
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send_multipart([_req(pull=ps_pb2.Pull())])
        assert died.wait(10)
        for t in plane._threads:
            if t.name == "ps-data-0":
                t.join(10)
        sock.close(0)
        assert plane.failed and failures == [plane.failed]
        assert status() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        plane.stop()
        channel.close()
        server.stop(None)
