"""The CTR example's pure parts: AUC and the planted click log."""
from __future__ import annotations

import json

import numpy as np
import pytest

from examples.ctr import data
from examples.ctr.evaluate import auc


def test_auc_counts_ties_half_and_degenerate_labels_as_chance():
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
    assert auc(np.array([0.2, 0.9]), np.array([1, 1])) == 0.5


def test_the_click_log_is_deterministic_and_its_best_auc_is_recorded(tmp_path):
    a = data.generate(2000, 500, seed=3)
    b = data.generate(2000, 500, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["cat"].shape == (2500, len(data.VOCAB)) and (a["cat"] < data.VOCAB).all()
    data.main(["--out", str(tmp_path), "--records", "2000", "--test-records", "500"])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["records"] == 2000 and 0.5 < meta["optimal_test_auc"] <= 1.0
    assert np.load(tmp_path / "test_y.npy").shape == (500,)


def test_bad_sizes_are_refused():
    with pytest.raises(SystemExit):
        data.main(["--records", "0"])
