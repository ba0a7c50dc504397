"""Bounded tables: admission, the cap with LRU/LFU, TTL, and deltas (ps.store.tables.table)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ps.store.embedding import initial_rows
from pswire.tables import TableSpec
from ps.store.optim import RowOptimizer
from ps.store.params import ParamStore
from pswire.optimizers import make_config
from ps.store.tables.eviction import Cause
from ps.store.tables.table import Table
from rpckit.errors import ServiceError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def table(opt: str = "adagrad", **kw) -> tuple[Table, Clock]:
    clock = Clock()
    cap = kw.pop("row_cap", 0)
    spec = TableSpec("t", 4, seed=1, **kw)
    return Table(spec, RowOptimizer(opt, 0.1), capacity=4, row_cap=cap, clock=clock), clock


def ids(*xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def held(t: Table) -> set[int]:
    return set(t.rows())


def test_admission_after_k_sightings():
    t, _ = table(admit_after=3)
    spec = t.spec
    for _ in range(2):  # K-1 sightings: no row, the initial value, pushes dropped
        rows, created = t.pull(ids(7, 8))
        assert created == 0 and len(t) == 0
        assert torch.equal(rows, initial_rows(spec, np.array([7, 8])))
        assert t.push(ids(7), torch.ones(1, 4)) == 0
    assert len(t) == 0 and t.filtered == 4 and t.admitted == 0
    rows, created = t.pull(ids(7, 9))  # the 3rd sighting of 7 creates its row, at its initial
    assert created == 1 and held(t) == {7}
    assert torch.equal(rows[0], initial_rows(spec, np.array([7]))[0])
    assert t.push(ids(7, 9), torch.ones(2, 4)) == 1  # 7 applied, 9 (1 sighting) dropped
    assert not torch.equal(t.pull(ids(7))[0][0], rows[0])
    assert t.admitted == 1


def test_an_unadmitted_id_costs_no_row_memory():
    t, _ = table(admit_after=2)
    before = t.nbytes
    for start in range(0, 50_000, 5_000):
        t.pull(torch.arange(start, start + 5_000))
    # the sketch may admit an id early on a collision (rarely), never hold one per id
    assert len(t) <= 100 and t.nbytes < before + (64 << 10)


def test_cap_holds_under_a_stream_of_distinct_ids():
    t, _ = table(max_rows=100, row_cap=100)
    for start in range(0, 10_000, 37):
        rows, _ = t.pull(torch.arange(start, start + 37))
        assert rows.shape == (37, 4)
        t.push(torch.arange(start, start + 37), torch.ones(37, 4))
        assert len(t) <= 100
    assert t.evicted[Cause.CAP] >= 10_000 - 100
    assert t.weights.shape[0] <= 100  # the arrays never grow past the cap


def test_a_request_larger_than_the_cap_gets_initial_values_for_the_rest():
    t, _ = table(row_cap=3)
    rows, created = t.pull(torch.arange(10, 15))
    assert created == 3 and held(t) == {10, 11, 12}
    assert torch.equal(rows, initial_rows(t.spec, np.arange(10, 15)))


def test_per_ps_share_rounds_up():
    stores = [ParamStore(index=i, num_ps=3) for i in range(3)]
    for s in stores:
        s.init_parameters([], make_config("sgd"), [(TableSpec("t", 2, max_rows=100), None)])
    for i, s in enumerate(stores):
        s.pull_rows("t", torch.arange(i, 3000, 3))
    total = sum(len(s.tables["t"]) for s in stores)
    assert total <= 100 + 3 - 1 and all(len(s.tables["t"]) == 34 for s in stores)


def test_lru_evicts_the_least_recently_touched():
    t, _ = table(row_cap=3, evict="lru")
    t.pull(ids(1, 2, 3))
    t.pull(ids(1))
    t.push(ids(2), torch.ones(1, 4))
    t.pull(ids(4))  # 3 is the least recently touched
    assert held(t) == {1, 2, 4}
    t.pull(ids(5, 1))  # 2 now (1 is touched by the request itself)
    assert held(t) == {1, 4, 5}


def test_lfu_evicts_the_least_often_touched():
    t, _ = table(row_cap=3, evict="lfu")
    t.pull(ids(1, 2, 3))
    for _ in range(3):
        t.pull(ids(1))
    t.pull(ids(3))
    t.pull(ids(2))  # 2 touched last, but twice; 3 twice too, earlier: 3 goes first
    t.pull(ids(4))
    assert held(t) == {1, 2, 4}
    t.pull(ids(5))  # 4: once
    assert held(t) == {1, 2, 5}


def test_an_evicted_row_comes_back_at_its_initial_value():
    t, _ = table(row_cap=1)
    t.pull(ids(1))
    t.push(ids(1), torch.ones(1, 4))
    t.pull(ids(2))
    rows, created = t.pull(ids(1))
    assert created == 1 and torch.equal(rows, initial_rows(t.spec, np.array([1])))


def test_ttl_steps_evicts_rows_untouched_for_that_many_pushes():
    t, _ = table(ttl_steps=2)
    t.pull(ids(1, 2, 3))
    t.push(ids(1), torch.ones(1, 4))   # pushes=1: 1 at 1, 2 and 3 at 0
    t.push(ids(1), torch.ones(1, 4))   # pushes=2
    assert held(t) == {1, 2, 3}
    t.push(ids(2), torch.ones(1, 4))   # pushes=3: 3 untouched for 3 > 2 pushes
    assert held(t) == {1, 2}
    assert t.evicted[Cause.TTL] == 1
    t.pull(ids(9))
    t.push(ids(9), torch.ones(1, 4))   # pushes=4: 1 (touched at 2) is 2 behind
    assert held(t) == {1, 2, 9}
    t.push(ids(9), torch.ones(1, 4))   # pushes=5: 1 is 3 behind, 2 (at 3) 2
    assert held(t) == {2, 9}
    t.push(ids(9), torch.ones(1, 4))   # pushes=6
    assert held(t) == {9} and t.evicted[Cause.TTL] == 3


def test_ttl_s_evicts_rows_untouched_for_that_long():
    t, clock = table(ttl_s=10.0)
    t.pull(ids(1, 2))
    clock.now += 6
    t.pull(ids(1))
    clock.now += 5  # 2 untouched for 11 s, 1 for 5 s
    t.expire()
    assert held(t) == {1}
    clock.now += 11
    t.pull(ids(3))  # the request's own sweep
    assert held(t) == {3}
    assert t.evicted[Cause.TTL] == 2


@pytest.mark.parametrize("evict", ["lru", "lfu"])
def test_a_copy_with_its_slots_ordered_otherwise_evicts_the_same_ids(evict):
    """A backup restores its primary's rows with the free slots in another order, so the same
    ids sit in other slots; it must still make the same eviction choices (ties between rows
    touched by one request are broken by id, not by slot)."""
    rng = np.random.default_rng(0)
    a, _ = table("sgd", row_cap=640, evict=evict)
    for _ in range(700):  # a cap of 640 evicts 10 at a time: 2 new ids leave slots free
        a.push(torch.from_numpy(rng.integers(0, 5000, 2)), torch.ones(2, 4))
    state = a.export()
    assert (state["ids"] < 0).any()
    b, _ = table("sgd", row_cap=640, evict=evict)
    b.restore(state)
    assert held(b) == held(a)
    for _ in range(600):  # the same requests on both (slot order decided ties: it diverged)
        batch = torch.from_numpy(rng.integers(0, 5000, 8))
        a.push(batch, torch.ones(8, 4))
        b.push(batch, torch.ones(8, 4))
    assert held(b) == held(a)
    assert all(torch.equal(a.rows()[i][0], b.rows()[i][0]) for i in held(a))


def test_rows_keep_count_and_last_touched_step():
    t, _ = table()
    t.pull(ids(1, 2))
    t.push(ids(1), torch.ones(1, 4))
    t.pull(ids(1, 1))
    rows = t.rows()
    assert rows[1][2:] == (3, 1) and rows[2][2:] == (1, 0)


def test_max_new_rows_counts_only_admitted_rows():
    t, _ = table(admit_after=2)
    t.pull(torch.arange(10), max_new=3)  # no row is created: not refused
    with pytest.raises(ServiceError):
        t.pull(torch.arange(10), max_new=3)
    assert len(t) == 0


def _equal(a: Table, b: Table) -> None:
    ra, rb = a.rows(), b.rows()
    assert ra.keys() == rb.keys()
    for k in ra:
        assert torch.equal(ra[k][0], rb[k][0]) and ra[k][2:] == rb[k][2:]
        assert (ra[k][1] is None) == (rb[k][1] is None)
        if ra[k][1] is not None:
            assert torch.equal(ra[k][1], rb[k][1])
    assert (a.pushes, a.step, a.tick, a.admitted, a.filtered, a.evicted) == \
        (b.pushes, b.step, b.tick, b.admitted, b.filtered, b.evicted)
    if a.sketch is not None:
        assert np.array_equal(a.sketch.counters, b.sketch.counters)


@pytest.mark.parametrize("kw", [dict(row_cap=40, evict="lfu"), dict(ttl_steps=5),
                                dict(admit_after=2, row_cap=30)])
def test_full_plus_deltas_equals_the_live_table(kw):
    live, _ = table(**kw)
    rng = np.random.default_rng(3)

    def traffic(n):
        for _ in range(n):
            batch = torch.from_numpy(np.unique(rng.zipf(1.3, 16) % 200))
            live.pull(batch)
            live.push(batch, torch.from_numpy(rng.standard_normal((batch.numel(), 4),
                                                                   dtype=np.float32)))

    traffic(20)
    full = live.export()
    live.mark_clean()
    deltas = []
    for _ in range(4):
        traffic(7)
        deltas.append(live.delta())
        live.mark_clean()
    restored, _ = table(**kw)
    restored.restore(full)
    for d in deltas:
        restored.apply_delta(d)
    _equal(restored, live)
    for batch in (ids(1, 2, 3), torch.arange(150, 190)):  # and they go on alike
        assert torch.equal(restored.pull(batch)[0], live.pull(batch)[0])
        restored.push(batch, torch.ones(batch.numel(), 4))
        live.push(batch, torch.ones(batch.numel(), 4))
    _equal(restored, live)


def test_a_delta_holds_only_changed_rows():
    t, _ = table()
    t.pull(torch.arange(1000))
    t.mark_clean()
    t.push(ids(5, 6), torch.ones(2, 4))
    d = t.delta()
    assert d["ids"].tolist() == [5, 6] and d["weights"].shape == (2, 4)
