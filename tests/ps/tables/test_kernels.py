"""The PS's compiled loops (ps/store/tables/kernels.py, the ownership check) against their numpy and
torch twins."""
from __future__ import annotations

from unittest import mock

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from ps.store.optim import RowOptimizer
from ps.slots.ownership import Ownership, WrongOwner
from ps.store.tables.index import RowIndex
from ps.store.tables import kernels, one_pass
from ps.store.tables.table import Table
from pswire.tables import TableSpec
from pswire.slots import row_slot_reference

@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(st.integers(0, 5000), max_size=200),
                                  st.lists(st.integers(0, 5000), max_size=60)), max_size=8),
       probe=st.lists(st.integers(0, 6000), max_size=300))
def test_index_lookups_and_inserts_agree_with_the_numpy_probe(batches, probe):
    index, held = RowIndex(), {}
    for add, drop in batches:
        new = np.array(sorted(set(add) - set(held)), dtype=np.int64)
        slots = np.arange(len(held), len(held) + new.size, dtype=np.int64) * 3
        index.insert(new, slots)
        held.update(zip(new.tolist(), slots.tolist()))
        gone = np.array(sorted(set(drop) & set(held)), dtype=np.int64)
        index.delete(gone)  # tombstones, which later inserts reuse
        for i in gone.tolist():
            del held[i]
        assert len(index) == len(held)
    keys = np.array(probe + list(held)[:50], dtype=np.int64)
    got = index.lookup(keys)
    assert np.array_equal(got, index.lookup_reference(keys))
    assert got.tolist() == [held.get(k, -1) for k in keys.tolist()]


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["sgd", "adagrad"]), lr=st.floats(1e-3, 1.0),
       lr_decay=st.sampled_from([0.0, 0.05]), eps=st.sampled_from([1e-10, 1e-6]),
       rows=st.integers(1, 64), seed=st.integers(0, 2**16))
def test_row_updates_agree_with_the_torch_calls(name, lr, lr_decay, eps, rows, seed):
    g = torch.Generator().manual_seed(seed)
    opt = RowOptimizer(name, lr, lr_decay=lr_decay, eps=eps)
    weights, accum = torch.randn(100, 4, generator=g), torch.rand(100, 4, generator=g)
    slots = torch.randperm(100, generator=g)[:rows].numpy()
    w2, a2 = weights.clone(), accum.clone()
    for step in (1, 2, 3):
        grads = torch.randn(rows, 4, generator=g)
        opt.apply(weights, accum, slots, grads, step)
        opt.apply_reference(w2, a2, slots, grads, step)
    assert torch.equal(accum, a2)  # the same two roundings
    # the weights within an ulp or so of the operands: torch's float32 sqrt may differ in its
    # last bit, and when w and lr * u (each up to ~4 here) nearly cancel, that ulp (~5e-7) is
    # all that is left of the difference, however small the result
    torch.testing.assert_close(weights, w2, rtol=1e-6, atol=1e-6)
    untouched = np.setdiff1d(np.arange(100), slots)
    assert torch.equal(weights[untouched], w2[untouched])


def test_ownership_check_names_the_first_row_of_another_ps_and_sees_frozen_slots():
    own = Ownership.initial(0, 2)  # slots 0..511 of 1024
    keys = np.arange(2000, dtype=np.int64)
    slots = row_slot_reference(keys, 1024)
    mine, other = keys[slots < 512], keys[slots >= 512]
    assert own.check(rows_w=[("t", mine)]) == ""
    try:
        own.check(rows_r=[("t", np.concatenate([mine[:5], other[3:4], other[:2]]))])
        raise AssertionError("rows of another PS were accepted")
    except WrongOwner as exc:
        assert f"row {int(other[3])} " in exc.message
    own.freeze(np.array([int(slots[keys == mine[7]][0])]))
    assert own.check(rows_r=[("t", mine)]) == ""  # reads of a frozen slot are served
    assert own.check(rows_w=[("t", mine)]) == "rows of table 't'"
    assert own.check(rows_w=[("t", mine[:7])]) == ""


def test_a_request_counts_each_row_once_whether_or_not_its_ids_repeat():
    from ps.store.tables import kernels
    from ps.store.tables.table import Table
    from pswire.tables import TableSpec

    counts, steps, dirty = np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(8, bool)
    slots = np.array([5, 1, 3], np.int64)
    assert kernels.touch(slots, np.array([2, 7, 9]), counts, steps, 4, dirty)
    assert counts.tolist() == [0, 1, 0, 1, 0, 1, 0, 0] and steps[[1, 3, 5]].tolist() == [4] * 3
    assert dirty.tolist() == [False, True, False, True, False, True, False, False]
    assert not kernels.touch(slots, np.array([2, 9, 7]), counts, steps, 5, dirty)
    assert counts.tolist() == [0, 1, 0, 1, 0, 1, 0, 0]  # not counted: the caller counts

    table = Table(TableSpec("t", 2), RowOptimizer("sgd", 0.1))
    table.pull(torch.tensor([4, 2, 4, 4, 9]))  # created, and touched once
    table.pull(torch.tensor([4, 2, 4, 4, 9]))
    table.pull(torch.tensor([2, 4, 9]))
    held = dict(zip(table.ids[:table.high].tolist(), table.counts[:table.high].tolist()))
    assert held == {4: 3, 2: 3, 9: 3}  # three requests: three touches each


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(0, 2**53 - 1), max_size=200),
       initializer=st.sampled_from(["normal", "uniform", "zeros"]), dim=st.integers(1, 17),
       seed=st.integers(0, 2**31), a=st.floats(-1, 1), width=st.floats(0, 1))
def test_initial_rows_agree_with_the_numpy_generator(ids, initializer, dim, seed, a, width):
    from ps.store.embedding import initial_rows, initial_rows_reference
    from pswire.tables import TableSpec

    spec = TableSpec("t", dim, initializer, a, width if initializer == "normal" else a + width,
                     seed=seed)
    keys = np.array(ids, dtype=np.int64)
    got, want = initial_rows(spec, keys), initial_rows_reference(spec, keys)
    assert got.dtype == torch.float32 and got.shape == (len(ids), dim)
    # libm's float64 log/cos/sin may differ from numpy's in the last bit, which float32 drops
    # (bit-equal over 20,000 rows here); allow that bit anyway
    torch.testing.assert_close(got, want, rtol=2**-23, atol=0)


_plain = one_pass.plain


class _General(Table):
    """A table that never takes the one-pass pull and push: the general path to compare with
    (`_one_pass_unless_general`)."""


def _one_pass_unless_general(table) -> bool:
    return not isinstance(table, _General) and _plain(table)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["sgd", "adagrad"]), lr_decay=st.sampled_from([0.0, 0.05]),
       calls=st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 300), max_size=40),
                                st.booleans()), max_size=12),
       seed=st.integers(0, 2**16))
def test_the_one_pass_pull_and_push_change_a_table_as_the_general_path(name, lr_decay, calls,
                                                                        seed):
    # pulls and pushes of held and new ids, sorted distinct (the SDK's) or not: the compiled
    # one-pass path (taken when every id is held) leaves every array and counter as the
    # general one does, and answers the same rows
    rng = np.random.default_rng(seed)
    opt = RowOptimizer(name=name, lr=0.1, lr_decay=lr_decay, initial_accumulator_value=0.1)
    fast, general = (cls(TableSpec(name="t", dim=3), opt, capacity=16, clock=lambda: 0.0)
                     for cls in (Table, _General))
    with mock.patch.object(one_pass, "plain", _one_pass_unless_general):
        _run(fast, general, calls, rng)
    for attr in ("step", "pushes", "tick", "admitted", "high"):
        assert getattr(fast, attr) == getattr(general, attr), attr
    assert torch.equal(fast.weights[:fast.high], general.weights[:general.high])
    if opt.has_accumulator:
        assert torch.equal(fast.accum[:fast.high], general.accum[:general.high])
    for attr in ("ids", "counts", "steps", "dirty"):
        assert np.array_equal(getattr(fast, attr)[:fast.high], getattr(general, attr)[:general.high])


def _run(fast, general, calls, rng) -> None:
    for is_push, ids, distinct in calls:
        keys = torch.tensor(sorted(set(ids)) if distinct else ids, dtype=torch.int64)
        if is_push:
            grads = torch.from_numpy(rng.standard_normal((keys.numel(), 3)).astype(np.float32))
            assert fast.push(keys, grads) == general.push(keys, grads.clone())
        else:
            (a, created_a), (b, created_b) = fast.pull(keys), general.pull(keys)
            assert torch.equal(a, b) and created_a == created_b


@settings(max_examples=40, deadline=None)
@given(held=st.sets(st.integers(0, 500), max_size=80), asked=st.lists(st.integers(0, 600),
                                                                       max_size=60),
       seed=st.integers(0, 2**16))
def test_the_marked_state_is_the_accumulator_rows_or_the_initial_state(held, asked, seed):
    rng = np.random.default_rng(seed)
    index = RowIndex()
    ids = np.array(sorted(held), dtype=np.int64)
    places = rng.permutation(max(ids.size, 1))[: ids.size].astype(np.int64)
    index.insert(ids, places)
    accum = rng.random((max(ids.size, 1), 3), dtype=np.float32)
    keys = np.array(asked, dtype=np.int64)
    marked = rng.random(keys.size) < 0.6
    got = kernels.marked_state(index.entries, keys, marked, index._shift, index._mask, accum,
                               np.float32(0.25))
    where = dict(zip(ids.tolist(), places.tolist()))
    want = [accum[where[k]].tolist() if k in where else [0.25] * 3
            for k, m in zip(keys.tolist(), marked.tolist()) if m]
    assert got.shape == (len(want), 3) and got.tolist() == want


def test_row_adagrad_with_eps_zero_on_a_zero_sum_answers_as_torch():
    """0 / 0 under eps 0: torch's NaN, as the reference's, not an error."""
    opt = RowOptimizer("adagrad", 0.1, eps=0.0)
    weights, accum = torch.ones(4, 2), torch.zeros(4, 2)
    w2, a2 = weights.clone(), accum.clone()
    slots, grads = np.array([0, 2]), torch.tensor([[0.0, 1.0], [0.0, -2.0]])
    opt.apply(weights, accum, slots, grads, 1)
    opt.apply_reference(w2, a2, slots, grads, 1)
    assert weights[0, 0].isnan() and weights[2, 0].isnan()
    torch.testing.assert_close(weights, w2, equal_nan=True)
    assert torch.equal(accum, a2)
