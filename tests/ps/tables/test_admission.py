"""AdmissionSketch: counts from above, in bounded memory, aged by halving."""
from __future__ import annotations

import numpy as np

from ps.store.tables.admission import AdmissionSketch


def test_estimates_never_undercount():
    sketch = AdmissionSketch(width=1 << 10)
    rng = np.random.default_rng(0)
    truth: dict[int, int] = {}
    for _ in range(100):
        ids = np.unique(rng.integers(0, 3000, 50))
        sketch.add(ids)
        for i in ids.tolist():
            truth[i] = truth.get(i, 0) + 1
        if sketch.halvings:
            break
    ids = np.fromiter(truth, dtype=np.int64)
    assert (sketch.estimate(ids) >= [truth[i] for i in ids.tolist()]).all()


def test_memory_is_fixed_and_counts_are_halved():
    sketch = AdmissionSketch(width=1 << 8)
    before = sketch.nbytes
    for start in range(0, 8 * 256, 64):
        sketch.add(np.arange(start, start + 64))
    assert sketch.nbytes == before and sketch.halvings == 1
    assert sketch.estimate(np.arange(100)).max() <= 2**15


def test_export_restore_roundtrip():
    a, b = AdmissionSketch(width=64), AdmissionSketch(width=64)
    a.add(np.array([1, 2, 3]))
    a.add(np.array([1]))
    b.restore(a.export())
    assert (b.estimate(np.array([1, 2, 9])) == a.estimate(np.array([1, 2, 9]))).all()


def test_changes_carry_only_the_counters_changed_since_the_file_and_rebuild_it_exactly():
    live, copy = AdmissionSketch(width=1 << 12), AdmissionSketch(width=1 << 12)
    live.add(np.arange(1000))
    copy.restore(live.export())
    live.mark_filed()
    assert live.changes()["changed_at"].numel() == 0
    for start in (5_000, 6_000):
        live.add(np.arange(start, start + 20))
        changes = live.changes()
        assert 0 < changes["changed_at"].numel() <= 4 * 20  # a few cells, not the sketch
        copy.restore(changes)
        live.mark_filed()
        assert np.array_equal(copy.counters, live.counters)
    while not live.halvings:  # a halving changes every counter that was not 0
        live.add(np.arange(10_000, 10_500))
    copy.restore(live.changes())
    assert np.array_equal(copy.counters, live.counters) and copy.halvings == live.halvings


def test_changes_are_the_whole_sketch_without_a_filed_copy_or_when_that_is_smaller():
    sketch = AdmissionSketch(width=64)
    sketch.add(np.array([1, 2]))
    assert "counters" in sketch.changes()
    sketch.mark_filed()
    sketch.add(np.arange(100, 200))  # most of the 256 counters change
    changes = sketch.changes()
    assert "counters" in changes and changes["counters"].numel() == 4 * 64
