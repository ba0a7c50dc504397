"""The one placement rule: dense by name balanced by size, rows by id."""
from __future__ import annotations

import random

import pytest
import torch

from pswire import partition


def test_every_tensor_placed_once_and_balanced():
    sizes = {f"layer{i}.weight": (i + 1) * 1000 for i in range(10)}
    sizes.update({f"layer{i}.bias": i + 1 for i in range(10)})
    placement = partition.place_dense(sizes, 3)
    assert set(placement) == set(sizes)
    load = [0, 0, 0]
    for name, index in placement.items():
        load[index] += sizes[name]
    # greedy largest-first: no PS exceeds the average by more than the largest tensor
    assert max(load) - min(load) <= max(sizes.values())


def test_stable_whatever_the_order():
    sizes = {f"t{i}": random.Random(i).randint(1, 10_000) for i in range(50)}
    expected = partition.place_dense(sizes, 4)
    items = list(sizes.items())
    for seed in range(5):
        random.Random(seed).shuffle(items)
        assert partition.place_dense(dict(items), 4) == expected


def test_ties_broken_by_name_and_index():
    placement = partition.place_dense({"b": 10, "a": 10, "c": 10, "d": 10}, 2)
    assert placement == {"a": 0, "b": 1, "c": 0, "d": 1}


def test_one_ps_holds_everything():
    assert set(partition.place_dense({"a": 5, "b": 0}, 1).values()) == {0}
    assert partition.split_dense({"a": 5, "b": 0}, 1) == [["a", "b"]]


def test_split_dense_lists_names_per_ps():
    groups = partition.split_dense({"big": 100, "small1": 40, "small2": 40}, 2)
    assert groups == [["big"], ["small1", "small2"]]


def test_rows_by_id_modulo():
    assert [partition.row_owner(i, 3) for i in range(6)] == [0, 1, 2, 0, 1, 2]
    ids = torch.tensor([7, 2, 9, 4, 4, 0])
    parts = partition.split_rows(ids, 2)
    assert [p[1].tolist() for p in parts] == [[2, 4, 4, 0], [7, 9]]
    assert [p[0].tolist() for p in parts] == [[1, 3, 4, 5], [0, 2]]
    back = torch.empty_like(ids)
    for positions, sub in parts:
        back[positions] = sub
    assert torch.equal(back, ids)


@pytest.mark.parametrize("bad", [-1, partition.MAX_ROW_ID + 1])
def test_bad_ids_refused(bad):
    with pytest.raises(ValueError):
        partition.row_owner(bad, 2)
    with pytest.raises(ValueError):
        partition.split_rows(torch.tensor([1, bad]), 2)


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_bad_num_ps_refused(bad):
    with pytest.raises(ValueError):
        partition.place_dense({"a": 1}, bad)


def test_sizes_of_a_module():
    model = torch.nn.Linear(4, 3)
    assert partition.sizes_of(model.named_parameters()) == {"weight": 48, "bias": 12}
