"""The worker's correction for its own last push (worker_sdk/ps/correct.py) against torch.optim:
the same numbers through torch's Adagrad and SGD, and through the PS's row optimizer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ps.store.optim import RowOptimizer
from worker_sdk.ps.correct import OwnWrites, correct_rows, correctable


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
def test_row_deltas_are_the_ps_row_optimizer(cfg):
    """Rows pushed in overlapping batches: each push's deltas, added to the rows as they were
    before it, give the PS's rows after it (ps/store/optim.py, torch's arithmetic); rows of
    ids never pushed before start from the accumulator's initial value."""
    rng = np.random.default_rng(1)
    opt = RowOptimizer.from_config(cfg)
    weights = torch.from_numpy(rng.standard_normal((50, 3)).astype(np.float32))
    accum = torch.full((50, 3), opt.initial_accumulator_value)
    own = OwnWrites({"name": "adam"}, {"e": cfg})  # the table's own optimizer is the one used
    for step in range(1, 8):
        ids = np.unique(rng.integers(0, 50, size=12))
        grads = torch.from_numpy(rng.standard_normal((ids.size, 3)).astype(np.float32))
        before = weights[torch.from_numpy(ids)].clone()
        _, rows = own.deltas({}, [("e", torch.from_numpy(ids), grads)])
        opt.apply_reference(weights, accum, ids, grads.clone(), step)
        got = correct_rows(torch.from_numpy(ids), before, rows["e"])
        assert torch.allclose(got, weights[torch.from_numpy(ids)], rtol=1e-5, atol=1e-6)


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


def test_the_accumulator_grows_past_its_first_size():
    own = OwnWrites({"name": "adagrad", "lr": 1.0}, {})
    for start in range(0, 20_000, 5_000):  # ids far apart: the map and the rows both grow
        ids = torch.arange(start, start + 5_000) * 1_000_003
        own.deltas({}, [("e", ids, torch.ones(5_000, 1))])
    _, rows = own.deltas({}, [("e", torch.tensor([0, 1_000_003 * 19_999]), torch.ones(2, 1))])
    # the second push of each: accumulator 2, delta -1/sqrt(2)
    assert torch.allclose(rows["e"][1], torch.tensor([-1 / 2 ** 0.5]))
