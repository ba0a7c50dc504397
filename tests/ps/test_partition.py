"""Row id bounds (pswire.partition): what every process refuses the same way."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pswire import partition


@pytest.mark.parametrize("bad", [-1, partition.MAX_ROW_ID + 1])
def test_bad_ids_refused(bad):
    with pytest.raises(ValueError):
        partition.check_row_ids([1, bad])
    with pytest.raises(ValueError):
        partition.check_row_ids(torch.tensor([1, bad]))


def test_good_ids_pass():
    partition.check_row_ids(torch.tensor([0, partition.MAX_ROW_ID]))
    partition.check_row_ids(torch.empty(0, dtype=torch.int64))
    partition.check_row_ids(np.array([3, 4]))
