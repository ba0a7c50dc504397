"""A request's small buffers joined into one frame (DataRequest.frame_sizes), over real
ZeroMQ to an in-process data plane: the PS reads them as the separate frames they stand for,
answers small buffers joined the same way, and refuses sizes that do not fit, applying
nothing."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zmq

from protos import ps_pb2
from ps.store.limits import Limits
from ps.store.params import ParamStore
from pswire.connection import COPY_BELOW, Connection, joined, split_joined
from pswire.tables import TableSpec
from rpckit.errors import ServiceError
from worker_sdk.ps.data_client import DataClient

CODE = ps_pb2.DataResponse.Code
DIM = 4


def _raw(endpoint: str, header: bytes, *parts):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send_multipart([header, *parts])
        assert sock.poll(10_000), "no answer"
        frames = sock.recv_multipart()
        return ps_pb2.DataResponse.FromString(frames[0]), frames[1:]
    finally:
        sock.close(0)


def _step_request(seq: int, sizes=None, **kw) -> bytes:
    step = ps_pb2.Step(push_rows=[ps_pb2.PushRows(table="emb")],
                       pull_rows=[ps_pb2.PullRows(table="emb")])
    return ps_pb2.DataRequest(client_id="raw", seq=seq, step=step, frame_sizes=sizes or [],
                              **kw).SerializeToString()


def _ready(inproc_ps, **limits):
    ps = inproc_ps(ParamStore(limits=Limits(**limits)))
    with DataClient([ps.endpoint], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(3)}, "sgd", lr=1.0,
                          tables=[TableSpec("emb", DIM, initializer="zeros")])
    return ps


def _buffers():
    ids = np.array([1, 5, 9], dtype=np.int64)
    grads = np.ones((3, DIM), dtype=np.float32)
    return [ids.tobytes(), grads.tobytes(), np.array([5, 2], dtype=np.int64).tobytes()]


def test_joined_and_split_are_inverse_and_only_small_plain_buffers_are_joined():
    parts = [b"ab", np.arange(3, dtype=np.int64), memoryview(b""), bytearray(b"xyz")]
    sizes, data = joined(parts)
    assert sizes == [2, 24, 0, 3] and len(data) == 29
    back = split_joined(data, ps_pb2.DataRequest(frame_sizes=sizes).frame_sizes, 4)
    assert [bytes(b) for b in back] == [b"ab", np.arange(3, dtype=np.int64).tobytes(), b"",
                                        b"xyz"]
    assert joined([b"one"]) is None  # nothing to save
    assert joined([b"a", bytes(COPY_BELOW)]) is None  # a large one goes from its own memory
    assert joined([b"a", zmq.Frame(b"b")]) is None
    with pytest.raises(ServiceError) as err:
        split_joined(data, sizes, 3)
    assert err.value.code == "RESOURCE_EXHAUSTED" and err.value.reason == "TOO_LARGE"
    with pytest.raises(ServiceError) as err:
        split_joined(data, [2, 24, 0, 4], 4)
    assert err.value.code == "INVALID_ARGUMENT"


def test_a_joined_step_is_applied_as_separate_frames_and_answered_joined(inproc_ps):
    ps = _ready(inproc_ps)
    bufs = _buffers()
    sizes, data = joined(bufs)
    resp, frames = _raw(ps.endpoint, _step_request(1, sizes), data)
    assert resp.code == CODE.OK, resp.message
    assert resp.step.push_rows[0].rows == 3
    # the answer's one buffer, the pulled rows, came as one joined frame: the sizes say so
    # only when there are two or more buffers, so this one is a plain frame
    assert list(resp.frame_sizes) == [] and len(frames) == 1
    rows = np.frombuffer(frames[0], dtype=np.float32).reshape(2, DIM)
    assert rows[0].tolist() == [-1.0] * DIM and rows[1].tolist() == [0.0] * DIM
    # two buffers in the answer (dense and rows) come joined
    step = ps_pb2.Step(pull=ps_pb2.Pull(names=["w"], packed=True),
                       pull_rows=[ps_pb2.PullRows(table="emb")])
    ids = np.array([5], dtype=np.int64).tobytes()
    header = ps_pb2.DataRequest(client_id="raw", seq=2, step=step,
                                frame_sizes=[len(ids)]).SerializeToString()
    resp, frames = _raw(ps.endpoint, header, ids)
    assert resp.code == CODE.OK and list(resp.frame_sizes) == [12, 16] and len(frames) == 1
    w, row = split_joined(frames[0], resp.frame_sizes, 2)
    assert bytes(w) == bytes(12) and np.frombuffer(row, np.float32).tolist() == [-1.0] * DIM


@pytest.mark.parametrize("case", ["sum", "count", "frames"])
def test_joined_sizes_that_do_not_fit_are_refused_and_change_nothing(inproc_ps, case):
    ps = _ready(inproc_ps, max_frames=8)
    bufs = _buffers()
    sizes, data = joined(bufs)
    parts = [data]
    if case == "sum":
        sizes = [sizes[0], sizes[1] + 8, sizes[2]]
    elif case == "count":
        sizes = sizes + [0] * 6  # 9 buffers, over --max-request-frames 8
    else:
        parts = [data, b""]
    resp, frames = _raw(ps.endpoint, _step_request(1, sizes), *parts)
    want = (CODE.RESOURCE_EXHAUSTED, "TOO_LARGE") if case == "count" else \
        (CODE.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert (resp.code, resp.reason) == want and not frames
    table = ps.store.tables["emb"]
    assert len(table) == 0 and table.pushes == 0


def test_a_client_joins_its_small_buffers_and_reads_joined_answers(inproc_ps, monkeypatch):
    ps = _ready(inproc_ps)
    sent = []
    plain = Connection.send
    monkeypatch.setattr(Connection, "send", lambda self, parts: sent.append(len(parts)) or
                        plain(self, parts))
    with DataClient([ps.endpoint], timeout_s=5) as c:
        c.set_layout({"w": 12})
        out = c.step({"w": torch.ones(3)}, rows=[("emb", torch.tensor([1, 5]), torch.ones(2, DIM))],
                     pull=["w"], pull_rows={"emb": torch.tensor([5, 7])})
        assert out.rows_updated == 2 and out.dense["w"].tolist() == [-1.0] * 3
        assert out.rows["emb"].tolist() == [[-1.0] * DIM, [0.0] * DIM]
        big = c.step({"w": torch.ones(3)}, rows=[("emb", torch.arange(COPY_BELOW // 8),
                                                    torch.ones(COPY_BELOW // 8, DIM))])
        assert big.rows_updated == COPY_BELOW // 8
    # four buffers went as one frame after the header; a gradient frame too large to join
    # made the second step go as it always did (header, dense, ids, gradients). (A header
    # alone went first: the staleness check of a client new to the PS.)
    assert sent == [1, 2, 4]
