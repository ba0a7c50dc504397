"""The in-shard order: a deterministic permutation of the whole shard, remainders included."""
from __future__ import annotations

import pytest

from worker_sdk.data.record_order import ShardLayout, shard_permutation


def test_each_shard_is_permuted_deterministically_and_independently():
    layout = ShardLayout(1000, 64, shuffle=True, seed=3)
    for index in (0, 7, 15):  # 15 is the short last shard [960, 1000)
        start, end = layout.shard_range(index)
        records = [layout.record(0, index, start, k) for k in range(end - start)]
        assert sorted(records) == list(range(start, end))
        assert records != list(range(start, end))
        assert records == [ShardLayout(1000, 64, True, 3).record(0, index, start, k)
                           for k in range(end - start)]
    a = list(shard_permutation(3, 0, 1, 64))
    assert a != list(shard_permutation(3, 1, 1, 64))  # another epoch
    assert a != list(shard_permutation(4, 0, 1, 64))  # another seed
    assert a != list(shard_permutation(3, 0, 2, 64))  # another shard


def test_a_remainder_lease_reads_the_rest_of_the_same_permutation():
    layout = ShardLayout(100, 10, shuffle=True, seed=0)
    whole = [layout.record(2, 4, 40, k) for k in range(10)]
    rest = [layout.record(2, 4, 43, k) for k in range(7)]  # the remainder [43, 50)
    assert rest == whole[3:]
    with pytest.raises(IndexError):
        layout.record(2, 4, 43, 7)


def test_without_shuffle_positions_are_records():
    layout = ShardLayout(25, 10, shuffle=False, seed=9)
    assert [layout.record(0, 2, 20, k) for k in range(5)] == [20, 21, 22, 23, 24]
    assert [layout.record(0, 1, 13, k) for k in range(2)] == [13, 14]


def test_a_large_shard_is_permuted_quickly():
    perm = shard_permutation(1, 0, 0, 1_000_000)
    assert len(perm) == 1_000_000 and perm.min() == 0 and perm.max() == 999_999
