"""pswire's compiled loops (pswire/jit.py) against their numpy twins."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from pswire.frames import require_finite
from pswire.jit import all_finite, unique_inverse
from pswire.slots import row_slot, row_slot_reference
from rpckit.errors import ServiceError


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(-2**63, 2**63 - 1), max_size=300),
       num_slots=st.integers(1, 16384))
def test_row_slot_is_splitmix64_mod_n(ids, num_slots):
    keys = np.array(ids, dtype=np.int64)
    assert np.array_equal(row_slot(keys, num_slots), row_slot_reference(keys, num_slots))


def test_row_slot_keeps_the_shape_and_the_kind_of_its_input():
    got = row_slot(torch.tensor([[1, 2], [3, 4]]), 1024)
    assert isinstance(got, torch.Tensor) and got.shape == (2, 2)
    assert got.flatten().tolist() == row_slot_reference(np.arange(1, 5), 1024).tolist()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_finds_every_nan_and_infinity_and_nothing_else(dtype):
    values = np.random.default_rng(0).standard_normal(4099).astype(dtype)
    assert all_finite(values) and all_finite(values[:0])
    assert all_finite(np.full(1000, np.finfo(dtype).max, dtype=dtype))  # a sum would overflow
    for bad in (np.nan, np.inf, -np.inf):
        for at in (0, 17, 4098):
            poisoned = values.copy()
            poisoned[at] = bad
            assert not all_finite(poisoned)


def test_require_finite_refuses_a_nan_in_any_float_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        t = torch.ones(5, 3, dtype=dtype)
        require_finite(t, "g")
        t[4, 2] = float("nan")
        with pytest.raises(ServiceError) as info:
            require_finite(t, "g")
        assert info.value.code == "INVALID_ARGUMENT"


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 2**53 - 1), max_size=300), num_ps=st.integers(1, 6),
       num_slots=st.integers(8, 2048), moved=st.lists(st.tuples(st.integers(0, 2047),
                                                                  st.integers(0, 5)),
                                                        max_size=20))
def test_split_rows_groups_ids_by_owner_as_the_numpy_version(ids, num_ps, num_slots, moved):
    from pswire.slots import Layout, Move, split_rows, split_rows_reference

    layout = Layout.initial(num_ps, num_slots, version=1)
    moves = {slot % num_slots: dst % num_ps for slot, dst in moved}
    layout = layout.with_moves([Move(s, layout.owner(s), d) for s, d in moves.items()
                                if layout.owner(s) != d])
    keys = np.array(ids, dtype=np.int64)
    got, want = split_rows(layout, keys), split_rows_reference(layout, keys)
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, positions, part), (_, want_positions, want_part) in zip(got, want):
        assert np.array_equal(positions, want_positions) and np.array_equal(part, want_part)


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(-2**63, 2**63 - 1), max_size=400),
       repeats=st.integers(1, 20))
def test_unique_inverse_answers_as_torch_unique(ids, repeats):
    # repeated ids (a batch's are), negative and extreme ones, and the empty batch
    keys = np.array(ids * repeats, dtype=np.int64)
    np.random.default_rng(len(ids)).shuffle(keys)
    unique, inverse = unique_inverse(keys)
    want_unique, want_inverse = torch.unique(torch.from_numpy(keys), return_inverse=True)
    assert np.array_equal(unique, want_unique.numpy())
    assert np.array_equal(inverse, want_inverse.numpy())
    assert np.array_equal(unique[inverse], keys)  # the inverse rebuilds the batch


def test_unique_inverse_of_the_sdk_keeps_torchs_answer_for_every_dtype_and_shape():
    from worker_sdk.ps.ids import unique_inverse as sdk_unique_inverse

    for ids in (torch.tensor([[7, 3], [3, 9]]), torch.tensor([5, 5, 1], dtype=torch.int32),
                torch.arange(12).reshape(3, 4).t(), torch.empty(0, dtype=torch.int64)):
        unique, inverse = sdk_unique_inverse(ids)
        want_unique, want_inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        assert unique.dtype == want_unique.dtype and torch.equal(unique, want_unique)
        assert torch.equal(inverse, want_inverse)


def test_place_rows_is_index_copy_for_writable_and_read_only_rows():
    from pswire.jit import place_rows

    rng = np.random.default_rng(3)
    positions = np.sort(rng.permutation(50)[:20])
    values = rng.normal(size=(20, 5)).astype(np.float32)
    expect = torch.zeros(50, 5).index_copy_(0, torch.from_numpy(positions),
                                            torch.from_numpy(values))
    out = np.zeros((50, 5), np.float32)
    place_rows(out, positions, values)
    assert np.array_equal(out, expect.numpy())
    values.flags.writeable = False  # rows answered in a read-only frame
    out = np.zeros((50, 5), np.float32)
    place_rows(out, positions, values)
    assert np.array_equal(out, expect.numpy())
