"""RowIndex: a hash map of ids to slots, batched, with deletes."""
from __future__ import annotations

import time

import numpy as np

from ps.store.tables.index import RowIndex


def test_lookup_insert_delete_match_a_dict():
    rng = np.random.default_rng(0)
    index, reference = RowIndex(), {}
    for _ in range(300):
        ids = np.unique(rng.integers(0, 5000, 64))
        expected = np.array([reference.get(int(i), -1) for i in ids])
        assert (index.lookup(ids) == expected).all()
        new = ids[expected < 0]
        slots = rng.integers(0, 10**6, new.size)
        index.insert(new, slots)
        reference.update(zip(new.tolist(), slots.tolist()))
        gone = rng.choice(np.fromiter(reference, dtype=np.int64), min(24, len(reference)),
                          replace=False)
        assert (index.delete(gone) == [reference.pop(int(g)) for g in gone]).all()
        assert len(index) == len(reference)
    ids, slots = index.items()
    assert dict(zip(ids.tolist(), slots.tolist())) == reference


def test_colliding_and_huge_ids():
    index = RowIndex()
    ids = np.array([0, 2**53 - 1, 1 << 40, (1 << 40) + 1, 7], dtype=np.int64)
    index.insert(ids, np.arange(5))
    assert (index.lookup(ids[::-1]) == np.arange(5)[::-1]).all()
    assert (index.lookup(np.array([1, 2**52])) == -1).all()
    assert (index.delete(np.array([7, 8])) == [4, -1]).all()


def test_cost_per_batch_does_not_grow_with_the_table():
    """A batch's lookup + insert at 1 M keys costs about what it does at 10 k (the sorted
    index it replaced copied every key on each insert: 100x more at 1 M)."""
    rng = np.random.default_rng(1)

    def per_batch(n: int) -> float:
        index = RowIndex()
        index.insert(np.arange(n, dtype=np.int64) * 7919, np.arange(n))
        best = float("inf")
        for k in range(20):
            batch = np.concatenate([rng.integers(0, n, 2048) * 7919,
                                    np.arange(256) + 10**12 + 256 * k])
            start = time.perf_counter()
            found = index.lookup(batch)
            index.insert(batch[found < 0], np.arange(np.count_nonzero(found < 0)))
            best = min(best, time.perf_counter() - start)
        return best

    small, large = per_batch(10_000), per_batch(1_000_000)
    assert large < 5 * small + 1e-3, (small, large)


def test_ids_displaced_past_the_lookup_window():
    """Ids sharing one home position sit up to 19 positions past it (and past deleted ones):
    a lookup finds each, and absent ids of that home are absent."""
    index = RowIndex(20)  # 64 positions: 20 keys do not trigger a rebuild
    capacity = index.entries.shape[0]
    candidates = np.arange(1, 200_000, dtype=np.int64)
    same = candidates[index._home(candidates) == 5][:30]
    index.insert(same[:20], np.arange(20))
    assert index.entries.shape[0] == capacity
    assert (index.lookup(same[:20]) == np.arange(20)).all()
    assert (index.lookup(same[20:]) == -1).all()
    assert (index.delete(same[:10:2]) == np.arange(0, 10, 2)).all()  # tombstones in between
    assert (index.lookup(same[:20]) == np.where(np.arange(20) % 2 | (np.arange(20) >= 10),
                                                np.arange(20), -1)).all()
    mixed = np.concatenate([same[19:20], np.array([7, 8, 9]), same[25:26], same[1:2]])
    assert (index.lookup(mixed) == [19, -1, -1, -1, -1, 1]).all()
