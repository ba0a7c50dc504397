"""A Step's row pull that asks for the optimizer state of some of its rows (PullRows.marked:
what a worker correcting for its own next push needs, worker_sdk/ps/correct.py): the state
read with the rows, the marks checked like every other input, and a client that asks none
answered as before."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from protos import ps_pb2
from ps.dataplane import data_plane
from ps.store.params import ParamStore
from pswire.frames import as_buffer, meta_of
from pswire.optimizers import make_config
from pswire.tables import TableSpec
from worker_sdk.ps.data_client import DataClient

DIM = 2
ADAGRAD = make_config("adagrad", lr=0.5, initial_accumulator_value=0.25)


def _store(optimizer=ADAGRAD, index: int = 0, num_ps: int = 1) -> ParamStore:
    s = ParamStore(index=index, num_ps=num_ps)
    s.init_parameters([("w", torch.zeros(3))], optimizer,
                      [(TableSpec("t", DIM, initializer="zeros"), None)])
    return s


def _request(ids, mask=None, seq: int = 1, frames=None) -> list:
    """A Step pushing w and rows 1 and 4, then reading the rows `ids` (their state where
    `mask` is 1, when given)."""
    step = ps_pb2.Step()
    step.push.tensors.append(meta_of("w", torch.ones(3)))
    step.push.versions.append(0)
    step.push_rows.add(table="t")
    step.pull_rows.add(table="t", marked=mask is not None)
    if frames is None:
        frames = [as_buffer(torch.ones(3)), as_buffer(torch.tensor([1, 4])),
                  as_buffer(torch.full((2, DIM), 2.0)), as_buffer(torch.tensor(ids))]
        if mask is not None:
            frames.append(np.asarray(mask, dtype=np.uint8).tobytes())
    return [ps_pb2.DataRequest(client_id="c", seq=seq, step=step).SerializeToString(), *frames]


def _held(s: ParamStore) -> tuple:
    t = s.tables["t"]
    return (s.versions(), len(t), t.weights[:len(t)].clone(), t.accum[:len(t)].clone())


def test_marked_rows_come_with_the_state_the_push_before_them_left():
    s = _store()
    reply = data_plane(s).handle(_request([4, 7, 1], [1, 0, 1]))
    resp = ps_pb2.DataResponse.FromString(reply[0])
    assert resp.code == 0 and len(reply) == 3  # the rows, then the marked rows' state
    assert [r.state for r in resp.step.pull_rows] == [True]
    state = np.frombuffer(bytes(reply[2]), dtype=np.float32).reshape(-1, DIM)
    # rows 4 and 1, in the order of the marked ids: 0.25 + 2 ** 2 after the push
    assert state.tolist() == [[4.25, 4.25], [4.25, 4.25]]
    rows = np.frombuffer(bytes(reply[1]), dtype=np.float32).reshape(-1, DIM)
    assert rows[1].tolist() == [0.0, 0.0] and rows[0][0] < 0


def test_a_step_without_marks_is_answered_as_before():
    s = _store()
    reply = data_plane(s).handle(_request([4, 7]))
    resp = ps_pb2.DataResponse.FromString(reply[0])
    assert resp.code == 0 and len(reply) == 2 and not resp.step.pull_rows[0].state


def test_marked_rows_not_held_answer_the_initial_state():
    s = _store()
    rows, created, state = s.tables["t"].pull_with_state(np.array([3, 9]),
                                                         np.array([False, True]))
    assert created == 2 and state.tolist() == [[0.25, 0.25]]


BAD_MARKS = {
    "mask shorter than the ids": dict(ids=[4, 7], mask=[1]),
    "mask longer than the ids": dict(ids=[4, 7], mask=[1, 0, 1]),
    "a byte neither 0 nor 1": dict(ids=[4, 7], mask=[1, 2]),
    "marked, no mask frame": dict(ids=[4, 7], mask=None, drop_mask=True),
}


@pytest.mark.parametrize("case", sorted(BAD_MARKS))
def test_bad_marks_refuse_the_step_and_change_nothing(case):
    s = _store()
    plane = data_plane(s)
    before = _held(s)
    bad = dict(BAD_MARKS[case])
    if bad.pop("drop_mask", False):
        req = _request(bad["ids"], [1, 1])[:-1]  # says marked, sends no mask
    else:
        req = _request(**bad)
    resp = ps_pb2.DataResponse.FromString(plane.handle(req)[0])
    assert ps_pb2.DataResponse.Code.Name(resp.code) == "INVALID_ARGUMENT"
    assert resp.reason == "INVALID_ARGUMENT"
    after = _held(s)
    assert after[:2] == before[:2] and all(torch.equal(a, b) for a, b in
                                           zip(after[2:], before[2:]))
    # the seq was not used up: the same step, marked right, is applied
    assert ps_pb2.DataResponse.FromString(plane.handle(_request([4, 7], [1, 0]))[0]).code == 0


def test_marks_on_a_table_without_state_are_refused():
    s = _store(make_config("sgd", lr=1.0))
    resp = ps_pb2.DataResponse.FromString(data_plane(s).handle(_request([4, 7], [1, 0]))[0])
    assert (ps_pb2.DataResponse.Code.Name(resp.code), resp.reason) == (
        "INVALID_ARGUMENT", "INVALID_ARGUMENT")
    assert s.versions() == {"w": 0} and len(s.tables["t"]) == 0


def test_a_step_over_two_ps_answers_the_marked_state_in_order(inproc_ps):
    planes = [inproc_ps(ParamStore(index=i, num_ps=2)) for i in range(2)]
    client = DataClient([p.endpoint for p in planes], timeout_s=5.0)
    try:
        client.init_parameters({"w": torch.zeros(3)}, "adagrad", lr=0.5,
                               initial_accumulator_value=0.25,
                               tables=[TableSpec("t", DIM, initializer="zeros")])
        ids = torch.arange(0, 40, 3)
        grads = torch.arange(float(2 * ids.numel())).view(-1, DIM)
        client.push_rows("t", ids, grads)
        read = torch.arange(0, 60, 2)
        mask = np.isin(read.numpy(), ids.numpy()) | (read.numpy() > 50)
        assert {int(i) % 2 for i in read[torch.from_numpy(mask)]} == {0}
        out = client.step(pull_rows={"t": read}, marks={"t": mask})
        assert torch.equal(out.rows["t"], client.pull_rows("t", read))
        expected = []
        for i in read[torch.from_numpy(mask)].tolist():
            at = ids.tolist().index(i) if i in ids.tolist() else None
            expected.append([0.25, 0.25] if at is None else (0.25 + grads[at] ** 2).tolist())
        assert torch.allclose(out.states["t"], torch.tensor(expected))
        held = {p.store.index: p.store.tables["t"] for p in planes}
        assert all(len(t) for t in held.values())  # the marked rows were on both PS
    finally:
        client.close()
