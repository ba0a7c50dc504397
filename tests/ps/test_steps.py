"""A Step (one training step's traffic in one message): the store's rules without a network,
the data plane's frame checks, and DataClient.step against two in-process PS."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from protos import ps_pb2
from ps.dataplane import data_plane
from pswire.tables import TableSpec
from ps.store.limits import Limits
from pswire.optimizers import make_config
from ps.store.params import ParamStore
from ps.store.steps import StepParts
from pswire.frames import as_buffer, decode, meta_of, pack
from rpckit.errors import ServiceError
from worker_sdk.ps.data_client import DataClient, StaleGradient

SGD1 = make_config("sgd", lr=1.0)
DIM = 2


def _store(index: int = 0, num_ps: int = 1, **kw) -> ParamStore:
    s = ParamStore(index=index, num_ps=num_ps, **kw)
    s.init_parameters([("w", torch.zeros(3)), ("b", torch.zeros(2))], SGD1,
                      [(TableSpec("t", DIM, initializer="zeros"), None)])
    return s


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _state(s: ParamStore) -> tuple:
    t = s.tables["t"]
    return ({n: _copy(d.value) for n, d in s.dense.items()}, s.versions(), len(t),
            _copy(t.weights[:len(t)]), t.pushes, s.stats.pushes, s.stats.row_pushes)


def _same(a: tuple, b: tuple) -> bool:
    dense_a, versions_a, n_a, rows_a, *rest_a = a
    dense_b, versions_b, n_b, rows_b, *rest_b = b
    return (all(torch.equal(dense_a[k], dense_b[k]) for k in dense_a) and versions_a == versions_b
            and n_a == n_b and torch.equal(rows_a, rows_b) and rest_a == rest_b)


def _parts(grads=None, versions=(), rows=(), pull=None, pull_rows=()) -> StepParts:
    return StepParts(grads=grads, versions=list(versions), rows=list(rows), pull=pull,
                     pull_rows=list(pull_rows))


def _step(s: ParamStore, seq: int, parts: StepParts, client: str = "c") -> dict:
    return s.step(client, seq, parts, lambda t: (t.clone(), None))


def test_mutations_then_reads_and_a_retry_reads_again_without_applying():
    s = _store()
    ids = torch.tensor([1, 4, 9])
    parts = _parts([("w", torch.ones(3))], [0], [("t", ids, torch.ones(3, DIM))],
                   pull=["w", "b"], pull_rows=[("t", torch.tensor([9, 2]))])
    answer = _step(s, 1, parts)
    assert answer["code"] == "OK" and not answer["duplicate"]
    assert answer["push"]["versions"] == {"w": 1} and answer["rows"] == [3]
    pulled = {name: (payload, version) for name, payload, version, _ in answer["pulled"]}
    assert pulled["w"][0].tolist() == [-1.0] * 3 and pulled["w"][1] == 1  # after the push
    rows, created = answer["pulled_rows"][0]
    assert rows.tolist() == [[-1.0, -1.0], [0.0, 0.0]] and created == 1  # row 2 is new
    again = _step(s, 1, parts)  # the same (client, seq): a lost answer retried
    assert again["duplicate"] and again["push"]["versions"] == {"w": 1}
    assert s.dense["w"].value.tolist() == [-1.0] * 3 and s.tables["t"].pushes == 1
    assert [r.tolist() for r, _ in again["pulled_rows"]] == [rows.tolist()]  # read again


def test_a_stale_push_applies_no_rows_and_reads_nothing():
    s = _store(max_staleness=0)
    assert _step(s, 1, _parts([("w", torch.ones(3))], [0]))["code"] == "OK"
    before = _state(s)
    answer = _step(s, 2, _parts([("w", torch.ones(3))], [0],  # computed from version 0
                                [("t", torch.tensor([1]), torch.ones(1, DIM))],
                                pull=["w"], pull_rows=[("t", torch.tensor([1]))]))
    assert answer["code"] == "FAILED_PRECONDITION" and answer["reason"] == "STALE_GRADIENT"
    assert "pulled" not in answer and "pulled_rows" not in answer
    assert _same(before, _state(s))


BAD_PARTS = {
    "unknown tensor pulled": (dict(pull=["w", "nope"]), "NOT_FOUND"),
    "unknown table pulled": (dict(pull_rows=[("nope", torch.tensor([0]))]), "NOT_FOUND"),
    # ids of a slot another PS owns: refused by the data plane before the store (WRONG_OWNER,
    # tests/ps/test_moves.py)
    "NaN row gradient": (dict(rows=[("t", torch.tensor([0]),
                                     torch.tensor([[float("nan"), 0.0]]))]), "INVALID_ARGUMENT"),
    "wrong row gradient shape": (dict(rows=[("t", torch.tensor([0]), torch.ones(1, 3))]),
                                 "INVALID_ARGUMENT"),
    # numpy, as the data plane decodes ids and row gradients (pswire.frames.rows_of)
    "NaN numpy row gradient": (dict(rows=[("t", np.array([0]), np.array(
        [[0.0, float("nan")]], dtype=np.float32))]), "INVALID_ARGUMENT"),
    "float64 numpy row gradient": (dict(rows=[("t", np.array([0]), np.ones((1, DIM)))]),
                                   "INVALID_ARGUMENT"),
    "negative id": (dict(rows=[("t", torch.tensor([-2]), torch.ones(1, DIM))]),
                    "INVALID_ARGUMENT"),
}


@pytest.mark.parametrize("case", sorted(BAD_PARTS))
def test_one_bad_part_refuses_the_whole_step_and_changes_nothing(case):
    s = _store(index=0, num_ps=2)
    _step(s, 1, _parts(rows=[("t", torch.tensor([0, 2]), torch.ones(2, DIM))]))
    before = _state(s)
    extra, code = BAD_PARTS[case]
    parts = {"grads": [("w", torch.ones(3))], "versions": [1],  # a valid push next to it
             "rows": [("t", torch.tensor([0]), torch.ones(1, DIM))], **extra}
    with pytest.raises(ServiceError) as err:
        _step(s, 2, _parts(**parts))
    assert err.value.code == code
    assert _same(before, _state(s))
    # the seq was not used up: the same seq, corrected, is applied
    assert _step(s, 2, _parts([("w", torch.ones(3))], [1]))["push"]["versions"] == {"w": 1}


@pytest.mark.parametrize("where", ["rows", "pull_rows"])
def test_too_many_new_rows_are_refused_before_the_push(where):
    s = _store(limits=Limits(max_new_rows=4))
    before = _state(s)
    ids = torch.arange(10)
    part = ([("t", ids, torch.ones(10, DIM))] if where == "rows" else [("t", ids)])
    with pytest.raises(ServiceError) as err:
        _step(s, 1, _parts([("w", torch.ones(3))], [0], **{where: part}))
    assert (err.value.code, err.value.reason) == ("RESOURCE_EXHAUSTED", "TOO_LARGE")
    assert _same(before, _state(s))


def _request(step: ps_pb2.Step, frames: list, seq: int = 1) -> list:
    return [ps_pb2.DataRequest(client_id="c", seq=seq, step=step).SerializeToString(), *frames]


def test_the_data_plane_checks_the_frames_and_answers_them_in_order():
    s = _store()
    plane = data_plane(s)
    step = ps_pb2.Step()
    step.push.tensors.append(meta_of("w", torch.ones(3)))
    step.push.versions.append(0)
    step.push_rows.add(table="t")
    step.pull.names.extend(["b", "w"])
    step.pull_rows.add(table="t")
    grads = [as_buffer(torch.ones(3)), as_buffer(torch.tensor([5])),
             as_buffer(torch.ones(1, DIM)), as_buffer(torch.tensor([5, 6]))]
    for frames in (grads[:-1], grads + [as_buffer(torch.tensor([1]))]):  # one short, one long
        resp = ps_pb2.DataResponse.FromString(plane.handle(_request(step, frames))[0])
        assert ps_pb2.DataResponse.Code.Name(resp.code) == "INVALID_ARGUMENT"
    checking = ps_pb2.Step()
    checking.push.check_only = True
    resp = ps_pb2.DataResponse.FromString(plane.handle(_request(checking, []))[0])
    assert ps_pb2.DataResponse.Code.Name(resp.code) == "INVALID_ARGUMENT"
    assert s.versions() == {"w": 0, "b": 0} and len(s.tables["t"]) == 0
    reply = plane.handle(_request(step, grads))
    resp = ps_pb2.DataResponse.FromString(reply[0])
    assert resp.code == 0 and resp.step.push.versions == {"w": 1}
    assert [m.name for m in resp.step.pull.tensors] == ["b", "w"] and len(reply) == 4
    assert torch.frombuffer(bytearray(reply[2]), dtype=torch.float32).tolist() == [-1.0] * 3
    rows = torch.frombuffer(bytearray(reply[3]), dtype=torch.float32).view(2, DIM)
    assert rows.tolist() == [[-1.0, -1.0], [0.0, 0.0]] and resp.step.pull_rows[0].created == 1


def _two(inproc_ps, **kw) -> tuple[list, DataClient]:
    planes = [inproc_ps(ParamStore(index=i, num_ps=2, **kw)) for i in range(2)]
    client = DataClient([p.endpoint for p in planes], timeout_s=5.0)
    client.init_parameters({"a": torch.zeros(3), "b": torch.zeros(2, 2), "c": torch.zeros(4)},
                           "sgd", lr=1.0, tables=[TableSpec("t", DIM, initializer="zeros")])
    return planes, client


def test_a_step_over_two_ps_equals_the_four_requests(inproc_ps):
    planes, c = _two(inproc_ps)
    _, plain = _two(inproc_ps)
    try:
        ids = torch.tensor([0, 1, 2, 3, 5])
        grads = {"a": torch.ones(3), "b": torch.full((2, 2), 2.0)}
        out = c.step(grads, rows=[("t", ids, torch.arange(10.0).view(5, DIM))],
                     pull=["a", "b", "c"], pull_rows={"t": torch.tensor([5, 0, 7, 2])})
        plain.push(grads)
        plain.push_rows("t", ids, torch.arange(10.0).view(5, DIM))
        assert out.push.versions == {"a": 1, "b": 1} and out.rows_updated == 5
        expected = plain.pull(["a", "b", "c"])
        assert all(torch.equal(out.dense[n], expected[n]) for n in expected)
        assert out.versions == {"a": 1, "b": 1, "c": 0}
        # rows come back in the order asked, from both PS
        assert torch.equal(out.rows["t"], plain.pull_rows("t", torch.tensor([5, 0, 7, 2])))
        assert out.rows["t"][0].tolist() == [-8.0, -9.0]
    finally:
        c.close()
        plain.close()


def test_a_stale_step_over_two_ps_is_applied_nowhere(inproc_ps):
    planes, c = _two(inproc_ps, max_staleness=0)
    try:
        grads = {"a": torch.ones(3), "b": torch.ones(2, 2), "c": torch.ones(4)}
        c.step(grads, pull=["a", "b", "c"])
        old = dict(c.versions)
        c.step(grads)  # versions move on past what the next step was computed from
        before = [_copy(p.store.tables["t"].weights[:len(p.store.tables["t"])]) for p in planes]
        with pytest.raises(StaleGradient):
            c.step(grads, old, rows=[("t", torch.tensor([0, 1]), torch.ones(2, DIM))],
                   pull=["a"], pull_rows={"t": torch.tensor([0, 1])})
        for plane, rows in zip(planes, before):
            assert plane.store.tables["t"].pushes == 0
            assert torch.equal(plane.store.tables["t"].weights[:len(plane.store.tables["t"])],
                               rows)
        assert {n: v for p in planes for n, v in p.store.versions().items()} == \
            {"a": 2, "b": 2, "c": 2}
    finally:
        c.close()


def _packed_request(grads: dict, seq: int, pull_packed: bool) -> list:
    step = ps_pb2.Step()
    step.push.packed_count = len(grads)
    for name, g in grads.items():
        step.push.tensors.append(meta_of(name, g))
        step.push.versions.append(seq - 1)
    step.pull.names.extend(["b", "w"])
    step.pull.packed = pull_packed
    return _request(step, [as_buffer(pack(list(grads.values())))], seq)


def test_a_packed_step_equals_one_frame_per_tensor_and_answers_packed_when_asked():
    packed, plain = _store(), _store()
    packed_plane, plain_plane = data_plane(packed), data_plane(plain)
    for seq in (1, 2):
        grads = {"w": torch.arange(3.0) * seq, "b": torch.tensor([0.5, -1.0])}
        step = ps_pb2.Step()
        for name, g in grads.items():
            step.push.tensors.append(meta_of(name, g))
            step.push.versions.append(seq - 1)
        step.pull.names.extend(["b", "w"])
        reply = plain_plane.handle(_request(step, [as_buffer(g) for g in grads.values()], seq))
        resp = ps_pb2.DataResponse.FromString(reply[0])
        assert resp.code == 0 and resp.step.pull.packed_count == 0 and len(reply) == 3
        expected = dict(decode(resp.step.pull.tensors, reply[1:])[0])
        reply = packed_plane.handle(_packed_request(grads, seq, pull_packed=True))
        resp = ps_pb2.DataResponse.FromString(reply[0])
        assert resp.code == 0 and resp.step.pull.packed_count == 2 and len(reply) == 2
        got = dict(decode(resp.step.pull.tensors, reply[1:], 2)[0])
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[n], expected[n]) for n in got)
        assert list(resp.step.pull.versions) == [seq, seq]
        assert _same(_state(packed), _state(plain))


def test_a_nan_in_a_packed_gradient_is_refused_by_name_and_nothing_is_applied():
    s = _store()
    before = _state(s)
    reply = data_plane(s).handle(_packed_request(
        {"w": torch.ones(3), "b": torch.tensor([1.0, float("nan")])}, 1, pull_packed=True))
    resp = ps_pb2.DataResponse.FromString(reply[0])
    assert ps_pb2.DataResponse.Code.Name(resp.code) == "INVALID_ARGUMENT"
    assert "'b'" in resp.message and "NaN" in resp.message
    assert _same(_state(s), before)


def test_a_clients_repeated_metas_are_checked_again_when_they_change():
    s = _store()
    plane = data_plane(s)

    def push(seq, tensors, frame=None, client="c"):
        step = ps_pb2.Step()
        step.push.packed_count = 2
        for name, t in tensors:
            step.push.tensors.append(meta_of(name, t))
            step.push.versions.append(0)
        frames = [frame if frame is not None else as_buffer(pack([t for _, t in tensors]))]
        req = ps_pb2.DataRequest(client_id=client, seq=seq, step=step).SerializeToString()
        resp = ps_pb2.DataResponse.FromString(plane.handle([req, *frames])[0])
        return ps_pb2.DataResponse.Code.Name(resp.code)

    good = [("w", torch.ones(3)), ("b", torch.ones(2))]
    assert push(1, good) == "OK" and push(2, good) == "OK"  # the second from the kept checks
    assert push(3, [("w", torch.ones(4)), ("b", torch.ones(2))]) == "INVALID_ARGUMENT"
    assert push(3, good, frame=as_buffer(torch.ones(4))) == "INVALID_ARGUMENT"  # one short
    assert push(3, [("w", torch.ones(3)), ("b", torch.ones(2, dtype=torch.int64))]) \
        == "INVALID_ARGUMENT"
    assert s.versions() == {"w": 2, "b": 2}
    assert push(3, good) == "OK" and push(1, good, client="d") == "OK"
    assert s.versions() == {"w": 4, "b": 4}
