"""The slot placement and the resize plan (pswire/slots.py): hashes, layouts, minimal moves."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from pswire.slots import (
    DEFAULT_SLOTS, Layout, LayoutMismatch, Move, SlotRange, decode_ranges, encode_ranges,
    plan_resize, row_slot, size_for, tensor_slot,
)


def test_row_slots_spread_neighbouring_ids_and_agree_between_numpy_and_torch():
    ids = np.arange(100_000, dtype=np.int64)
    slots = row_slot(ids, DEFAULT_SLOTS)
    assert slots.dtype == np.int64 and slots.min() >= 0 and slots.max() < DEFAULT_SLOTS
    counts = np.bincount(slots, minlength=DEFAULT_SLOTS)
    assert counts.min() > 50 and counts.max() < 150  # ~98 each: not id % n's stripes
    assert not (slots[:DEFAULT_SLOTS] == np.arange(DEFAULT_SLOTS)).all()
    t = row_slot(torch.arange(100_000), DEFAULT_SLOTS)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.int64
    assert (t.numpy() == slots).all()
    big = np.array([2**53 - 1, 0, 7], dtype=np.int64)
    assert row_slot(big, 16).tolist() == row_slot(big, 16).tolist()  # stable, no salt


def test_splitmix64_is_the_published_function():
    # splitmix64 of 0 (state advanced once by the golden gamma): a known constant
    assert int(row_slot(np.array([0], dtype=np.int64), 2**14)[0]) == 0xE220A8397B1DCDAF % 2**14


def test_tensor_slots_are_stable_across_processes():
    assert tensor_slot("fc.weight", 1024) == tensor_slot("fc.weight", 1024)
    assert {tensor_slot(f"layer{i}.weight", 1024) for i in range(50)}.__len__() > 40
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c",
                          "from pswire.slots import tensor_slot; print(tensor_slot('fc.weight', 1024))"],
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == tensor_slot("fc.weight", 1024)


def test_initial_layout_is_contiguous_blocks_differing_by_one():
    layout = Layout.initial(3, 1024)
    assert layout.version == 1 and layout.num_ps == 3 and layout.shares() == [342, 341, 341]
    assert layout.ranges(0) == [SlotRange(0, 342)]
    assert layout.ranges(2) == [SlotRange(683, 1024)]
    assert layout.ranges(5) == []
    ids = torch.tensor([1, 2, 3, 10**12])
    owners = layout.owner_of_rows(ids)
    assert owners.tolist() == [layout.owner(int(s)) for s in row_slot(ids, 1024)]
    assert layout.owner_of_tensor("w") == layout.owner(tensor_slot("w", 1024))
    with pytest.raises(ValueError):
        Layout.initial(5, 4)  # more PS than slots


def test_ranges_round_trip_and_bad_ones_are_refused():
    layout = Layout.initial(2, 10).with_moves([Move(9, 1, 0)])
    assert layout.version == 2
    text = {i: encode_ranges(layout.ranges(i)) for i in range(2)}
    assert text == {0: "0:5,9:10", 1: "5:9"}
    back = Layout.from_ranges({i: decode_ranges(t, 10) for i, t in text.items()}, 10, 2)
    assert back == layout
    for bad in ("0:5,4:6", "5:3", "0:11", "a:b", "3"):
        with pytest.raises(ValueError):
            decode_ranges(bad, 10)
    with pytest.raises(ValueError, match="no owner"):
        Layout.from_ranges({0: [(0, 5)]}, 10, 1)
    with pytest.raises(ValueError, match="overlaps"):
        Layout.from_ranges({0: [(0, 6)], 1: [(5, 10)]}, 10, 1)
    with pytest.raises(ValueError, match="cannot move"):
        layout.with_moves([Move(0, 1, 0)])  # PS 0 owns slot 0


def test_the_registration_rule():
    assert size_for(0, 0, 0, 0) == 1 and size_for(1, 2, 0, 0) == 2  # no layout: the first
    with pytest.raises(LayoutMismatch, match="no PS layout yet"):
        size_for(1, 0, 0, 0)
    assert size_for(1, 0, 2, 2) == 2 and size_for(1, 2, 2, 2) == 2
    with pytest.raises(LayoutMismatch, match="resize-ps 3"):
        size_for(2, 3, 2, 2)  # the stray PS of issue 25
    with pytest.raises(LayoutMismatch, match="resize-ps 3"):
        size_for(2, 0, 2, 2)
    with pytest.raises(LayoutMismatch, match="resize-ps 3"):
        size_for(0, 3, 2, 2)
    assert size_for(2, 0, 2, 4) == 4 and size_for(3, 4, 2, 4) == 4  # grow targets
    assert size_for(1, 2, 2, 4) == 2  # a member keeps the layout's size until slots move
    # mid-resize an index restarts with any count under which it exists (issue 38): its
    # original flags or the target's; one only a grow adds, or one a shrink removes, with less
    assert size_for(1, 4, 2, 4) == 4 and size_for(1, 0, 2, 4) == 2
    assert size_for(1, 2, 4, 2) == 2 and size_for(1, 4, 4, 2) == 4
    # the layout's size moved with the first slot moved: the original count still fits
    assert size_for(1, 2, 3, 3, resizing=True) == 2
    with pytest.raises(LayoutMismatch, match="give 3"):
        size_for(1, 2, 3, 3)  # no resize on: the layout's count only
    with pytest.raises(LayoutMismatch, match="from 3 to 4"):
        size_for(2, 2, 2, 4)
    with pytest.raises(LayoutMismatch, match="from 4 to 4"):
        size_for(3, 2, 4, 2)
    with pytest.raises(LayoutMismatch, match="from 2 to 4"):
        size_for(1, 5, 2, 4)
    assert size_for(3, 0, 4, 2) == 4  # shrinking: a leaving index is still in the layout


def _min_moves(counts: list[int], target: int, slots: int) -> int:
    q, r = divmod(slots, target)
    over = [c - q for c in counts[:target] if c > q]
    return sum(counts[target:]) + sum(over) - min(r, len(over))


def _check_plan(layout: Layout, target: int) -> Layout:
    moves = plan_resize(layout, target)
    counts = layout.shares()
    assert len({m.slot for m in moves}) == len(moves)  # a slot moves at most once
    assert all(layout.owner(m.slot) == m.src and m.dst < target for m in moves)
    assert not {m.src for m in moves} & {m.dst for m in moves}  # give or receive, not both
    assert len(moves) == _min_moves(counts, target, layout.num_slots)  # only surplus moves
    after = layout.with_moves(moves)
    owners = after.owners()
    assert len(owners) == layout.num_slots and owners.max() < target  # one owner each
    shares = np.bincount(owners, minlength=target)
    assert shares.max() - shares.min() <= 1
    assert after.num_ps == target
    covered = sorted((r.start, r.end) for i in range(target) for r in after.ranges(i))
    assert covered[0][0] == 0 and covered[-1][1] == layout.num_slots
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    if target == layout.num_ps + 1:
        assert len(moves) <= math.ceil(layout.num_slots / target)
    return after


@settings(max_examples=150, deadline=None)
@given(slots=st.sampled_from([1, 2, 7, 64, 100, 1024]), first=st.integers(1, 12),
       targets=st.lists(st.integers(1, 16), min_size=1, max_size=8))
def test_any_sequence_of_grows_and_shrinks_keeps_one_owner_balance_and_minimal_moves(
        slots, first, targets):
    layout = Layout.initial(min(first, slots), slots)
    for target in targets:
        layout = _check_plan(layout, min(target, slots))


@settings(max_examples=60, deadline=None)
@given(slots=st.sampled_from([16, 1024, 4096]), n=st.integers(1, 40),
       steps=st.lists(st.sampled_from([-1, 1]), min_size=1, max_size=6))
def test_growing_by_one_moves_at_most_a_share(slots, n, steps):
    layout = Layout.initial(min(n, slots), slots)
    for step in steps:
        target = min(slots, max(1, layout.num_ps + step))
        if target == layout.num_ps:
            continue
        moves = plan_resize(layout, target)
        if step == 1:
            assert len(moves) <= math.ceil(slots / target)
            assert {m.dst for m in moves} <= {target - 1}  # only the new index receives
        layout = layout.with_moves(moves)


def test_the_plan_of_a_grow_from_two_to_three():
    moves = plan_resize(Layout.initial(2, 1024), 3)
    assert len(moves) == 341 and {m.dst for m in moves} == {2}
    after = Layout.initial(2, 1024).with_moves(moves)
    assert after.shares() == [342, 341, 341]
    assert after.ranges(2) == [SlotRange(342, 512), SlotRange(853, 1024)]
    assert plan_resize(after, 3) == []  # balanced already
    with pytest.raises(ValueError):
        plan_resize(after, 0)
