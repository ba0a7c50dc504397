"""The worker's correction for its own last push (worker_sdk/ps/correct.py) against torch.optim:
the same numbers through torch's Adagrad and SGD, and through the PS's row optimizer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ps.store.optim import RowOptimizer
from worker_sdk.ps.correct import OwnWrites, correct_rows, correctable, marks, place_marked


def _pushes(shape, count, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen) for _ in range(count)]


@pytest.mark.parametrize("cfg, make", [
    ({"name": "adagrad", "lr": 0.3}, lambda p: torch.optim.Adagrad([p], lr=0.3)),
    ({"name": "adagrad", "lr": 0.1, "initial_accumulator_value": 0.5, "eps": 1e-3},
     lambda p: torch.optim.Adagrad([p], lr=0.1, initial_accumulator_value=0.5, eps=1e-3)),
    ({"name": "sgd", "lr": 0.2}, lambda p: torch.optim.SGD([p], lr=0.2)),
])
def test_dense_deltas_are_torchs_steps(cfg, make):
    start = torch.randn(3, 4, generator=torch.Generator().manual_seed(9))
    p = nn_param(start)
    opt = make(p)
    own = OwnWrites(cfg, {})
    value = start.clone()
    for g in _pushes((3, 4), 5):
        p.grad = g.clone()
        opt.step()
        dense, _ = own.deltas({"w": g}, [])
        value = value + dense["w"]  # what the next step computes on, before the PS answers
        assert torch.allclose(value, p.detach(), rtol=1e-5, atol=1e-6)


def nn_param(t):
    return torch.nn.Parameter(t.clone())


@pytest.mark.parametrize("cfg", [{"name": "adagrad", "lr": 0.3}, {"name": "sgd", "lr": 0.2},
                                 {"name": "adagrad", "lr": 0.1, "eps": 1e-2,
                                  "initial_accumulator_value": 0.25}])
def test_row_corrections_are_the_ps_row_optimizer(cfg):
    """Rows pushed in overlapping batches: each push's update, added to the rows as they
    were before it with the PS's state of them (as a marked read sends it), gives the PS's
    rows after it (ps/store/optim.py, torch's arithmetic); the worker keeps no state."""
    rng = np.random.default_rng(1)
    opt = RowOptimizer.from_config(cfg)
    weights = torch.from_numpy(rng.standard_normal((50, 3)).astype(np.float32))
    accum = torch.full((50, 3), opt.initial_accumulator_value)
    own = OwnWrites({"name": "adam"}, {"e": cfg})  # the table's own optimizer is the one used
    for step in range(1, 8):
        ids = np.unique(rng.integers(0, 50, size=12))
        read = np.unique(rng.integers(0, 50, size=12))  # the next batch: meets some of ids
        grads = torch.from_numpy(rng.standard_normal((ids.size, 3)).astype(np.float32))
        before = weights[torch.from_numpy(read)].clone()
        marked = marks(read, ids)
        state = accum[torch.from_numpy(read[marked])].clone()
        _, rows = own.deltas({}, [("e", torch.from_numpy(ids), grads)])
        opt.apply_reference(weights, accum, ids, grads.clone(), step)
        assert correct_rows(torch.from_numpy(read), before, rows["e"],
                            (marked, state)) == 0
        assert torch.allclose(before, weights[torch.from_numpy(read)], rtol=1e-5, atol=1e-6)


def test_adagrad_rows_without_their_state_are_left_as_read():
    own = OwnWrites({"name": "adagrad", "lr": 1.0}, {})
    _, rows = own.deltas({}, [("e", torch.tensor([2, 5, 9]), torch.ones(3, 2))])
    read = torch.zeros(4, 2)
    marked = np.array([False, True, False, False])  # 9 met the push but has no state
    state = torch.full((1, 2), 3.0)  # the PS's sum before the push: 3, after it 4
    assert correct_rows(torch.tensor([1, 5, 9, 11]), read, rows["e"], (marked, state)) == 1
    assert read.tolist() == [[0, 0], [-0.5, -0.5], [0, 0], [0, 0]]
    assert state.tolist() == [[4, 4]]  # advanced: a later push corrects on from there
    assert correct_rows(torch.tensor([5]), torch.zeros(1, 2), rows["e"]) == 1  # no state


def test_rows_are_corrected_where_the_ids_meet_only():
    own = OwnWrites({"name": "sgd", "lr": 1.0}, {})
    _, rows = own.deltas({}, [("e", torch.tensor([2, 5, 9]), torch.ones(3, 2))])
    read = torch.zeros(4, 2)
    correct_rows(torch.tensor([1, 5, 9, 11]), read, rows["e"])
    assert read.tolist() == [[0, 0], [-1, -1], [-1, -1], [0, 0]]


def test_other_optimizers_and_decays_are_not_corrected():
    assert correctable({"name": "adagrad"}) and correctable({"name": "sgd", "lr": 0.1})
    assert not correctable({"name": "adam", "lr": 0.1})
    assert not correctable({"name": "adagrad", "lr_decay": 0.01})
    assert not correctable({"name": "sgd", "momentum": 0.9})
    own = OwnWrites({"name": "adam"}, {})
    assert own.deltas({"w": torch.ones(2)}, [("e", torch.tensor([1]), torch.ones(1, 2))]) \
        == ({}, {})


def test_state_rows_are_placed_by_rank_whatever_the_order_of_a_parts_positions():
    """A PS answers the state rows of its marked ids in the order it was sent them; a part
    re-routed after a slot moved joins two refused parts' ids (positions 6, 9, then 1, 4, 2):
    each row still lands at its id's rank among every marked id of the call, and an answer
    with too few or too many rows is told (the caller refuses it)."""
    mask = np.array([0, 1, 0, 1, 1, 0, 1, 0, 0, 1], bool)  # marked 1, 3, 4, 6, 9: ranks 0-4
    positions = np.array([6, 9, 1, 4, 2])  # 3 went to another PS; 2 is not marked
    got = np.array([[60, 61], [90, 91], [10, 11], [40, 41]], np.float32)
    out = np.zeros((5, 2), np.float32)
    assert place_marked(mask, positions, got.ravel(), out) == got.size
    assert out.tolist() == [[10, 11], [0, 0], [40, 41], [60, 61], [90, 91]]
    assert place_marked(mask, positions, got.ravel()[:6], out) == -1
    assert place_marked(mask, positions, np.ones(10, np.float32), out) == 8
