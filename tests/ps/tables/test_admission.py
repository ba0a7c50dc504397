"""AdmissionSketch: counts from above, in bounded memory, aged by halving."""
from __future__ import annotations

import numpy as np

from ps.tables.admission import AdmissionSketch


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
