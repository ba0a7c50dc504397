"""A table's read of rows, under its lock: the usual one-pass read, and otherwise the rows
not held created (as admission and the cap allow) or answered at their initial values."""
from __future__ import annotations

import numpy as np
import torch

from ..embedding import initial_rows
from ..optim import gather_rows
from . import kernels, one_pass
from .index import distinct_in_order


def pull(table, keys: np.ndarray, max_new: int | None) -> tuple[torch.Tensor, int]:
    """`Table.pull` under the table's lock (held by the caller)."""
    now = table.clock()
    table._expire(now)
    rows = one_pass.pull(table, keys)  # the usual pull (ps/store/tables/one_pass.py)
    if rows is not None:
        return rows, 0
    places = table.index.lookup(keys)
    created = 0
    missing_at = (places < 0).nonzero()[0]
    if missing_at.size:
        missing = distinct(keys[missing_at])
        admit = table._admitted(missing, max_new)
        created = table._create(admit, places, now)
        if created == missing.size:  # every id holds a row now: the usual pass reads them
            rows = one_pass.pull(table, keys)
            if rows is not None:
                return rows, created
        places[missing_at] = table.index.lookup(keys[missing_at])
        missing_at = (places < 0).nonzero()[0]
    table.tick += 1
    if not missing_at.size:
        table._touch(places, keys, now)
        return gather_rows(table.weights, places), created
    held = places >= 0
    table._touch(places[held], keys[held], now)
    rows = torch.empty(keys.size, table.spec.dim)
    at = torch.from_numpy(held.nonzero()[0])
    rows[at] = gather_rows(table.weights, places[held])
    rows[torch.from_numpy(missing_at)] = initial_rows(table.spec, keys[missing_at])
    return rows, created


def distinct(keys: np.ndarray) -> np.ndarray:
    """`distinct_in_order(keys)`; ids in increasing order (what the SDK sends) are that
    already, which one compiled pass tells."""
    if kernels.increasing(keys):
        return keys
    return distinct_in_order(keys)
