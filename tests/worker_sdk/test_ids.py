"""Ids checked and cut once per batch: what is kept must never outlive the ids or the layout."""
import numpy as np
import pytest
import torch

from pswire.slots import Layout, Move, split_rows
from worker_sdk.ps.ids import mark, prepared, unique_inverse
from worker_sdk.ps.parts import Part, Rows, SplitMemo, split

TWO = Layout.initial(2)


def _same_cut(a, b) -> bool:
    return [i for i, _, _ in a] == [i for i, _, _ in b] and all(
        np.array_equal(pa, pb) and np.array_equal(ia, ib)
        for (_, pa, ia), (_, pb, ib) in zip(a, b))


def test_a_memo_cuts_again_when_the_layout_changes():
    ids = np.arange(0, 3000, 3, dtype=np.int64)
    memo = SplitMemo()
    assert _same_cut(memo.split(TWO, ids), split_rows(TWO, ids))
    kept = memo.split(TWO, ids)
    assert memo.split(TWO, ids) is kept
    # an equal layout held as another object (another client's): the cut is the same
    equal = Layout(TWO.owners().copy(), version=TWO.version + 3)
    assert memo.split(equal, ids) is kept
    moved = TWO.with_moves([Move(s, 0, 1) for s in range(TWO.num_slots // 4)])
    assert _same_cut(memo.split(moved, ids), split_rows(moved, ids))
    assert not _same_cut(split_rows(moved, ids), split_rows(TWO, ids))
    three = Layout.initial(3)
    assert _same_cut(memo.split(three, ids), split_rows(three, ids))


def test_split_uses_a_rows_memo_for_its_whole_list_only():
    ids = np.arange(100, dtype=np.int64)
    memo = SplitMemo()
    first = split(Part(pull_rows=[Rows("t", ids, memo=memo)]), TWO, TWO.owner_of_tensor)
    again = split(Part(rows=[Rows(0, ids, memo=memo)]), TWO, TWO.owner_of_tensor)
    for index in first:
        (a,), (b,) = first[index].pull_rows, again[index].rows
        assert (a.ids == b.ids).all() and (a.positions == b.positions).all()
        assert b.key == 0 and a.memo is None  # a part of the list: no memo of its own


def test_marked_ids_are_checked_once_and_kept_until_written():
    unique, inverse = unique_inverse(torch.tensor([[7, 3], [3, 9]]))
    assert unique.tolist() == [3, 7, 9] and inverse.tolist() == [1, 0, 0, 2]
    mark(unique)
    array, memo = prepared(unique)
    assert array.tolist() == [3, 7, 9] and memo is not None
    assert prepared(unique)[1] is memo  # the same memo for the pull and the push after it
    unique[0] = 5  # written in place: whatever was kept is forgotten
    array, memo = prepared(unique)
    assert array.tolist() == [5, 7, 9] and memo is None
    unique[1] = -1
    with pytest.raises(ValueError, match=">= 0"):
        prepared(unique)


def test_unmarked_ids_are_converted_and_checked_each_time():
    array, memo = prepared([[4, 1], [1, 2]])
    assert array.tolist() == [4, 1, 1, 2] and array.dtype == np.int64 and memo is None
    assert prepared(torch.tensor([2, 5]))[1] is None
    with pytest.raises(ValueError, match=">= 0"):
        prepared(torch.tensor([3, -2, 1]))
    with pytest.raises(ValueError, match="2\\*\\*53"):
        prepared([2**53])


def test_mark_checks_the_bounds_by_the_ends_of_sorted_ids():
    with pytest.raises(ValueError, match="got -4"):
        mark(torch.unique(torch.tensor([5, -4, 2])))
    with pytest.raises(ValueError, match="2\\*\\*53"):
        mark(torch.unique(torch.tensor([1, 2**53])))
    empty = mark(torch.unique(torch.tensor([], dtype=torch.int64)))
    assert prepared(empty)[0].size == 0
