"""Property tests of the data plane: random and malformed requests of every kind, built from the
ps.proto descriptors, plus random frames (counts, sizes, dtypes, shapes, NaN and infinities,
garbage headers), against a real PS: an in-process DataPlane and one `python -m ps
--standalone` process.

What must hold for every request: it is answered (the PS never hangs), never UNKNOWN or
INTERNAL, a refused one changes no state (parameters, versions, optimizer state, rows), and the
PS stays up and healthy afterwards. FUZZ_EXAMPLES=N runs N requests in process instead of 600
(a longer hunt; each run draws new examples, and a failure prints the one to reproduce).
"""
from __future__ import annotations

import hashlib
import os
import math

import grpc
import numpy as np
import pytest
import torch
import zmq
from google.protobuf.descriptor import FieldDescriptor as F
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos import ps_pb2, ps_pb2_grpc
from pswire.tables import TableSpec
from ps.store.limits import Limits
from ps.store.params import ParamStore
from pswire.frames import DTYPES
from worker_sdk.ps.data_client import DataClient

CODE = ps_pb2.DataResponse.Code
BUGS = (CODE.UNKNOWN, CODE.INTERNAL)
# names the PS knows, so that many requests get past the first checks
WORDS = ["w", "b", "emb", "small", "sgd", "adagrad", "adam", "normal", "uniform", "zeros",
         "float32", "float64", "float16", "bfloat16", "int64", "complex64", ""]
MODEL = {"w": torch.zeros(2, 3), "b": torch.zeros(3)}
TABLES = [TableSpec("emb", 4, seed=1), TableSpec("small", 2, num_embeddings=50)]
LIMITS = Limits(max_names=8, max_frames=12, max_new_rows=64)
MAX_DEPTH = 3

_INT_RANGES = {
    F.TYPE_INT64: (-2**63, 2**63 - 1), F.TYPE_SINT64: (-2**63, 2**63 - 1),
    F.TYPE_SFIXED64: (-2**63, 2**63 - 1), F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1), F.TYPE_INT32: (-2**31, 2**31 - 1),
    F.TYPE_SINT32: (-2**31, 2**31 - 1), F.TYPE_SFIXED32: (-2**31, 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1),
}


def _scalar(field) -> st.SearchStrategy:
    if field.type == F.TYPE_STRING:
        return st.one_of(st.sampled_from(WORDS), st.text(max_size=12))
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=32)
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True,
                         width=64 if field.type == F.TYPE_DOUBLE else 32)
    if field.type == F.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    low, high = _INT_RANGES[field.type]
    return st.one_of(st.integers(max(low, -3), min(high, 70)), st.integers(low, high))


def messages(desc, depth: int = 0) -> st.SearchStrategy:
    """Random messages of `desc`: any subset of its fields, each with a random value (small
    lists for repeated fields, at most one member of each oneof)."""
    fields = {}
    for field in desc.fields:
        if field.message_type is not None:
            if depth >= MAX_DEPTH:
                continue
            value = messages(field.message_type, depth + 1)
        else:
            value = _scalar(field)
        if field.is_repeated:
            value = st.lists(value, max_size=4)
        fields[field.name] = value
    cls = ps_pb2.DataRequest if desc is ps_pb2.DataRequest.DESCRIPTOR else None

    def build(values: dict):
        msg = (cls or _class_of(desc))()
        oneofs: set[str] = set()
        for name, value in values.items():
            field = desc.fields_by_name[name]
            if field.containing_oneof is not None and field.containing_oneof.name in oneofs:
                continue
            if field.containing_oneof is not None:
                oneofs.add(field.containing_oneof.name)
            if field.is_repeated:
                target = getattr(msg, name)
                for item in value:
                    target.add().CopyFrom(item) if field.message_type else target.append(item)
            elif field.message_type is not None:
                getattr(msg, name).CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries({}, optional=fields).map(build)


def _class_of(desc):
    return getattr(ps_pb2, desc.name)


KINDS = ("init_parameters", "pull", "push", "pull_rows", "push_rows", "step")


@st.composite
def bodies(draw) -> ps_pb2.DataRequest:
    """A DataRequest whose body is one of the six client requests, random inside."""
    kind = draw(st.sampled_from(KINDS))
    desc = ps_pb2.DataRequest.DESCRIPTOR.fields_by_name[kind].message_type
    req = draw(messages(ps_pb2.DataRequest.DESCRIPTOR, MAX_DEPTH))  # envelope scalars only
    getattr(req, kind).CopyFrom(draw(messages(desc, 1)))
    return req


def _values(dtype: torch.dtype, numel: int) -> st.SearchStrategy:
    if dtype == torch.int64:
        return st.lists(st.one_of(st.integers(-2, 120), st.integers(-2**63, 2**63 - 1)),
                        min_size=numel, max_size=numel).map(
            lambda v: np.asarray(v, dtype=np.int64).tobytes())
    floats = st.one_of(st.floats(-4, 4, width=32), st.floats(-4, 4, width=32),
                       st.sampled_from([math.nan, math.inf, -math.inf, 3e38, -0.0]))
    return st.lists(floats, min_size=numel, max_size=numel).map(
        lambda v: torch.tensor(v, dtype=torch.float32).to(dtype).reshape(-1)
        .view(torch.uint8).numpy().tobytes())


@st.composite
def frames_for(draw, req: ps_pb2.DataRequest) -> list[bytes]:
    """Frames that fit the header (so the request reaches the store) or do not."""
    kind = req.WhichOneof("body")
    style = "fit" if draw(st.integers(0, 5)) >= 2 else draw(st.sampled_from(["random", "none"]))
    if style == "none":
        return []
    if style == "random":
        return draw(st.lists(st.binary(max_size=48), max_size=14))
    if kind == "step":  # the parts' frames in the Step's order (protos/ps.proto)
        step = req.step
        out = _tensor_frames(draw, step.push.tensors)
        for _ in step.push_rows:
            out += _rows_frames(draw, True)
        for _ in step.pull_rows:
            out += _rows_frames(draw, False)
        if draw(st.integers(0, 4)) == 0 and out:  # one frame too few or too many
            out = out[:-1] if draw(st.booleans()) else out + [out[-1]]
        return out
    metas = []
    if kind in ("init_parameters", "push"):
        metas = list(getattr(req, kind).tensors)
    out = _tensor_frames(draw, metas)
    if kind in ("pull_rows", "push_rows"):
        out += _rows_frames(draw, kind == "push_rows")
    return out


def _tensor_frames(draw, metas) -> list[bytes]:
    out = []
    for meta in metas:
        dtype = DTYPES.get(meta.dtype, torch.float32)
        numel = math.prod(meta.shape) if len(meta.shape) <= 8 else -1
        if 0 <= numel <= 64 and all(d >= 0 for d in meta.shape):
            out.append(draw(_values(dtype, numel)))
        else:
            out.append(draw(st.binary(max_size=32)))
    return out


def _rows_frames(draw, grads: bool) -> list[bytes]:
    n = draw(st.integers(0, 80))
    if draw(st.integers(0, 3)):  # mostly ids this PS owns (index 0 of 2: even ones)
        ids = draw(st.lists(st.integers(0, 60).map(lambda i: 2 * i), min_size=n, max_size=n))
        out = [np.asarray(ids, dtype=np.int64).tobytes()]
    else:
        out = [draw(_values(torch.int64, n))]
    if grads:
        dim = draw(st.sampled_from([2, 4, 3]))
        out.append(draw(_values(torch.float32, n * dim)))
    return out


SHAPES = {"w": [2, 3], "b": [3]}


@st.composite
def metas(draw) -> ps_pb2.TensorMeta:
    name = draw(st.sampled_from(["w", "b", "w", "b", "x", ""]))
    shape = draw(st.one_of(st.just(SHAPES.get(name, [2])),
                           st.lists(st.integers(-1, 4), max_size=3),
                           st.lists(st.integers(0, 2**40), min_size=1, max_size=9)))
    dtype = draw(st.sampled_from(["float32", "float32", "float64", "bfloat16", "int64", "x"]))
    return ps_pb2.TensorMeta(name=name, dtype=dtype, shape=shape)


@st.composite
def near_valid(draw) -> ps_pb2.DataRequest:
    """Requests close to what a worker sends, each with a few things possibly wrong, so that
    they get past the first checks and into the store."""
    kind = draw(st.sampled_from(KINDS))
    req = ps_pb2.DataRequest(client_id=draw(st.sampled_from(["a", "b", ""])),
                             seq=draw(st.integers(0, 40)))
    if kind == "init_parameters":
        body = req.init_parameters
        body.tensors.extend(draw(st.lists(metas(), max_size=3)))
        body.optimizer.name = draw(st.sampled_from(["adagrad", "sgd", "adam", "x"]))
        if draw(st.booleans()):
            body.optimizer.lr = draw(st.floats(allow_nan=True, allow_infinity=True))
        for _ in range(draw(st.integers(0, 2))):
            body.tables.add(name=draw(st.sampled_from(["emb", "small", "t"])),
                            dim=draw(st.sampled_from([4, 2, 0, -1, 2**20])),
                            initializer=draw(st.sampled_from(["normal", "zeros", "x", ""])),
                            init_b=draw(st.floats(allow_nan=True, allow_infinity=True)),
                            num_embeddings=draw(st.sampled_from([0, 50, -5])))
    elif kind == "pull":
        req.pull.names.extend(draw(st.lists(st.sampled_from(["w", "b", "x"]), max_size=10)))
    elif kind == "push":
        req.push.tensors.extend(draw(st.lists(metas(), max_size=3)))
        req.push.versions.extend(draw(st.lists(st.integers(-3, 5), min_size=len(
            req.push.tensors), max_size=len(req.push.tensors) + draw(st.integers(0, 1)))))
        req.push.check_only = draw(st.booleans())
        req.push.checked = draw(st.booleans())
    elif kind == "step":
        step = req.step
        if draw(st.booleans()):
            step.push.tensors.extend(draw(st.lists(metas(), max_size=2)))
            step.push.versions.extend(draw(st.lists(st.integers(-3, 5), min_size=len(
                step.push.tensors), max_size=len(step.push.tensors) + draw(st.integers(0, 1)))))
            step.push.check_only = draw(st.integers(0, 5)) == 0
        for _ in range(draw(st.integers(0, 2))):
            step.push_rows.add(table=draw(st.sampled_from(["emb", "small", "x"])))
        if draw(st.booleans()):
            step.pull.names.extend(draw(st.lists(st.sampled_from(["w", "b", "x"]), max_size=3)))
        for _ in range(draw(st.integers(0, 2))):
            step.pull_rows.add(table=draw(st.sampled_from(["emb", "small", "x"])))
    else:
        getattr(req, kind).table = draw(st.sampled_from(["emb", "small", "x"]))
    return req


@st.composite
def requests(draw) -> list[bytes]:
    if draw(st.integers(0, 19)) == 0:  # a header that is not a DataRequest
        return [draw(st.binary(min_size=1, max_size=64)), *draw(st.lists(st.binary(max_size=8),
                                                                          max_size=3))]
    req = draw(st.one_of(bodies(), near_valid(), near_valid()))
    req.token = ""
    return [req.SerializeToString(), *draw(frames_for(req))]


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def fingerprint(store: ParamStore) -> tuple:
    """The model state a refused request must leave as it was."""
    dense = tuple(
        (n, d.version, _digest(d.value, *[v for s in d.optimizer.state.values()
                                          for v in s.values() if isinstance(v, torch.Tensor)]))
        for n, d in sorted(store.dense.items()))
    tables = tuple((n, len(t), t.pushes, t.step, _digest(t.weights[:len(t)]))
                   for n, t in sorted(store.tables.items()))
    return (store.initialized, repr(store.optimizer_cfg), dense, tables, store.stats.pushes,
            store.stats.row_pushes)


class Wire:
    def __init__(self, endpoint: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def ask(self, parts: list[bytes]) -> ps_pb2.DataResponse:
        self.sock.send_multipart(parts)
        assert self.sock.poll(20_000), "the PS did not answer"
        reply = self.sock.recv_multipart()
        return ps_pb2.DataResponse.FromString(reply[0])

    def close(self) -> None:
        self.sock.close(0)


def _check(resp: ps_pb2.DataResponse, parts: list[bytes]) -> None:
    assert resp.code not in BUGS, (resp, parts[:3])
    if resp.code != CODE.OK:
        assert resp.message and len(resp.message) < 2000, resp


def test_random_requests_never_break_an_in_process_ps(inproc_ps):
    fresh = inproc_ps(ParamStore(index=0, num_ps=2, limits=LIMITS))
    # one PS for the client (it owns every slot); the fresh one owns half (WRONG_OWNER fuzzed)
    ready = inproc_ps(ParamStore(index=0, num_ps=1, max_staleness=1, limits=LIMITS))
    with DataClient([ready.endpoint], timeout_s=10) as c:
        c.init_parameters(MODEL, "adagrad", lr=0.1, tables=TABLES)
    wires = [Wire(fresh.endpoint), Wire(ready.endpoint)]
    counts = {"ok": 0, "refused": 0}

    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "600")), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(target=st.sampled_from([0, 1]), parts=requests())
    def one(target, parts):
        store = (fresh, ready)[target].store
        before = fingerprint(store)
        resp = wires[target].ask(parts)
        _check(resp, parts)
        if resp.code == CODE.OK:
            counts["ok"] += 1
        else:
            counts["refused"] += 1
            assert fingerprint(store) == before, (resp, parts[:3])

    try:
        one()
    finally:
        for w in wires:
            w.close()
    assert counts["ok"] > 0 and counts["refused"] > 0, counts
    for ps in (fresh, ready):
        assert not ps.plane.failed and all(t.is_alive() for t in ps.plane._threads)
    with DataClient([ready.endpoint], timeout_s=10) as c:  # still serving the real model
        c.set_layout({"w": 24, "b": 12})
        assert c.pull(["w"])["w"].shape == (2, 3)


@pytest.mark.slow
def test_random_requests_never_break_a_ps_process(launcher):
    ps = launcher.ps(None, "--checkpoint-interval", "0", "--max-staleness", "1",
                     "--max-request-names", "8", "--max-request-frames", "12",
                     "--max-new-rows", "64", "--index", "0", "--num-ps", "1")
    endpoint = ps.data_address
    with DataClient([endpoint], timeout_s=30) as c:
        c.init_parameters(MODEL, "adagrad", lr=0.1, tables=TABLES)
    channel = grpc.insecure_channel(ps.grpc_address)
    stub = ps_pb2_grpc.ParameterServerStub(channel)
    wire = Wire(endpoint)

    def state() -> tuple:
        resp = wire.ask([ps_pb2.DataRequest(pull=ps_pb2.Pull()).SerializeToString()])
        status = stub.GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=10)
        return (resp.SerializeToString(), status.pushes,
                tuple((t.spec.name, t.rows, t.pushes) for t in status.tables))

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(parts=requests())
    def one(parts):
        before = state()
        resp = wire.ask(parts)
        _check(resp, parts)
        if resp.code != CODE.OK:
            assert state() == before, (resp, parts[:3])

    try:
        one()
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="elasticps.v1.ParameterServer"), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert ps.alive
    finally:
        wire.close()
        channel.close()
