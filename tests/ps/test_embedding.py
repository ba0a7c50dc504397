"""Embedding tables: deterministic lazy rows, row-wise updates equal torch's sparse ones."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ps.store.embedding import initial_rows
from ps.store.tables.table import Table
from pswire.tables import TableSpec
from rpckit.errors import ServiceError as PSError
from ps.store.optim import RowOptimizer
from pswire.optimizers import make_config
from ps.store.params import ParamStore


def test_rows_depend_only_on_seed_table_and_id():
    spec = TableSpec("emb", 16, seed=3)
    ids = np.array([5, 0, 2**40, 17])
    rows = initial_rows(spec, ids)
    again = initial_rows(spec, ids[::-1].copy())
    assert torch.equal(rows, again.flip(0))
    assert not torch.equal(rows, initial_rows(TableSpec("emb", 16, seed=4), ids))
    assert not torch.equal(rows, initial_rows(TableSpec("other", 16, seed=3), ids))
    # a table created in another order (another PS, another restart) agrees row by row
    a, b = Table(spec, RowOptimizer("sgd", 0.1)), Table(spec, RowOptimizer("sgd", 0.1))
    a.pull(torch.tensor([1, 2, 3]))
    assert torch.equal(a.pull(torch.tensor([3, 9]))[0], b.pull(torch.tensor([9, 3]))[0].flip(0))


def test_initializers_have_the_asked_distribution():
    ids = np.arange(4000)
    normal = initial_rows(TableSpec("n", 64, "normal", 0.5, 0.1), ids)
    assert abs(normal.mean().item() - 0.5) < 0.01 and abs(normal.std().item() - 0.1) < 0.01
    uniform = initial_rows(TableSpec("u", 64, "uniform", -0.2, 0.2), ids)
    assert uniform.min() >= -0.2 and uniform.max() < 0.2 and abs(uniform.mean()) < 0.01
    assert torch.count_nonzero(initial_rows(TableSpec("z", 8, "zeros"), ids)) == 0


@pytest.mark.parametrize("optimizer,hyper", [
    ("sgd", dict(lr=0.3)),
    ("adagrad", dict(lr=0.1)),
    ("adagrad", dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2, eps=1e-6)),
])
def test_row_updates_match_torch_sparse_embedding(optimizer, hyper):
    dim, num = 8, 50
    spec = TableSpec("emb", dim, seed=11)
    store = ParamStore()
    store.init_parameters([], make_config("sgd"), [(spec, {"name": optimizer, **hyper})])
    reference = torch.nn.Embedding(num, dim, sparse=True)
    with torch.no_grad():
        reference.weight.copy_(initial_rows(spec, np.arange(num)))
    opt = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}[optimizer](
        reference.parameters(), **hyper)
    g = torch.Generator().manual_seed(0)
    for step in range(1, 8):
        ids = torch.randint(0, num, (20,), generator=g)
        ids[1] = ids[0]  # duplicates in one push are summed
        upstream = torch.randn(20, dim, generator=g)
        opt.zero_grad()
        (reference(ids) * upstream).sum().backward()
        opt.step()
        store.push_rows("c", step, "emb", ids, upstream)
    everything = torch.arange(num)
    torch.testing.assert_close(store.pull_rows("emb", everything)[0], reference.weight.detach(),
                               rtol=1e-5, atol=1e-6)


def test_pull_creates_rows_lazily_and_once():
    store = ParamStore()
    store.init_parameters([], make_config("sgd"), [(TableSpec("e", 4), None)])
    rows, created = store.pull_rows("e", torch.tensor([3, 1, 3]))
    assert created == 2 and torch.equal(rows[0], rows[2])
    assert store.pull_rows("e", torch.tensor([1, 3]))[1] == 0
    assert len(store.tables["e"]) == 2


def test_table_grows_past_its_capacity():
    t = Table(TableSpec("e", 2, seed=1), RowOptimizer("adagrad", 0.1), capacity=4)
    first = t.pull(torch.arange(3))[0]
    t.push(torch.arange(3), torch.ones(3, 2))
    rows = t.pull(torch.arange(100))[0]
    assert len(t) == 100 and t.weights.shape[0] >= 100
    assert torch.allclose(rows[:3], first - 0.1)
    assert torch.equal(rows[3:], initial_rows(t.spec, np.arange(3, 100)))


@pytest.mark.parametrize("ids", [[-1], [2**53], [0, 2**62]])
def test_negative_and_huge_ids_refused(ids):
    store = ParamStore()
    store.init_parameters([], make_config("sgd"), [(TableSpec("e", 4), None)])
    for call in (lambda: store.pull_rows("e", torch.tensor(ids)),
                 lambda: store.push_rows("c", 1, "e", torch.tensor(ids), torch.ones(len(ids), 4))):
        with pytest.raises(PSError) as err:
            call()
        assert err.value.code == "INVALID_ARGUMENT"
    assert len(store.tables["e"]) == 0


def test_each_ps_only_takes_ids_of_its_own_slots():
    """The data plane serves only rows whose hash slot this PS owns (ps/slots/ownership.py): PS 1 of
    2 owns the second half of the first layout; another slot's id is WRONG_OWNER."""
    from protos import ps_pb2
    from ps.dataplane.handlers import Handlers
    from pswire.frames import as_buffer
    from pswire.slots import Layout
    from rpckit.errors import Reason

    store = ParamStore(index=1, num_ps=2)
    store.init_parameters([], make_config("sgd"), [(TableSpec("e", 4), None)])
    owners = Layout.initial(2).owner_of_rows(torch.arange(64))
    mine, theirs = torch.arange(64)[owners == 1], torch.arange(64)[owners == 0]
    req = ps_pb2.DataRequest(pull_rows=ps_pb2.PullRows(table="e"))
    Handlers(store).handle("pull_rows", req, [as_buffer(mine)])
    with pytest.raises(PSError) as wrong:
        Handlers(store).handle("pull_rows", req, [as_buffer(torch.cat([mine[:2], theirs[:1]]))])
    assert wrong.value.reason == Reason.WRONG_OWNER and f"row {int(theirs[0])}" in str(wrong.value)


def test_bad_row_pushes_refused():
    store = ParamStore()
    store.init_parameters([], make_config("sgd"), [(TableSpec("e", 4), None)])
    for call, code in [
        (lambda: store.pull_rows("nope", torch.tensor([1])), "NOT_FOUND"),
        (lambda: store.push_rows("c", 1, "e", torch.tensor([1, 2]), torch.ones(2, 5)),
         "INVALID_ARGUMENT"),
        (lambda: store.push_rows("c", 1, "e", torch.tensor([1]), torch.ones(1, 4,
                                                                       dtype=torch.float64)),
         "INVALID_ARGUMENT"),
        (lambda: store.pull_rows("e", torch.tensor([[1]])), "INVALID_ARGUMENT"),
    ]:
        with pytest.raises(PSError) as err:
            call()
        assert err.value.code == code


def test_a_retried_row_push_is_applied_once():
    store = ParamStore()
    store.init_parameters([], make_config("sgd", lr=1.0), [(TableSpec("e", 2, "zeros"), None)])
    assert not store.push_rows("c", 1, "e", torch.tensor([4]), torch.ones(1, 2))["duplicate"]
    assert store.push_rows("c", 1, "e", torch.tensor([4]), torch.ones(1, 2))["duplicate"]
    assert store.pull_rows("e", torch.tensor([4]))[0].tolist() == [[-1.0, -1.0]]


@pytest.mark.parametrize("init", [("normal", 0.5, 0.1), ("uniform", -0.2, 0.2), ("zeros", 0, 0)])
def test_rows_created_in_place_hold_the_initial_rows_in_fresh_and_reused_places(init):
    """Rows are written where they live (ps/store/tables/kernels.py `create_rows`), into new
    places and into the places of evicted rows: the values of `initial_rows`, to the bit, and
    the accumulator's initial value."""
    spec = TableSpec("e", 5, *init, seed=2, max_rows=8)
    t = Table(spec, RowOptimizer("adagrad", 0.1, initial_accumulator_value=0.3), row_cap=8)
    first = np.arange(8)
    rows = t.pull(first)[0]
    t.push(first, torch.ones(8, 5))
    again = np.arange(100, 106)  # past the cap: evicts, and reuses those places
    later = t.pull(again)[0]
    assert t.evicted and sum(t.evicted.values()) >= 6
    assert torch.equal(rows, initial_rows(spec, first))
    assert torch.equal(later, initial_rows(spec, again))
    held = t.rows()
    for i in again.tolist():
        weights, accum, count, step = held[i]
        assert torch.equal(weights, initial_rows(spec, np.array([i]))[0])
        assert torch.all(accum == torch.tensor(0.3, dtype=torch.float32)) and count == 1
