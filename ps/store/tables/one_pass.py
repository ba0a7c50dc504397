"""A table's usual pull and push in one compiled pass each (`kernels.pull_held` / `push_held`).

A training step pulls and pushes sorted distinct ids (what the SDK sends), and once a table is
warm every one of them holds a row. For a table whose touch of a held row is only its count,
step and dirty mark (no cap's touch order, no TTL clock, no slot move recording it), the
lookup, the touch and the copy or update then need no Python between them. Anything else (an
id without a row, ids not sorted and distinct) returns None / False having changed nothing,
and the table takes its general path; both leave a table the same (tests/ps/tables). Called
with the table's lock held.
"""
from __future__ import annotations

import numpy as np
import torch

from ..optim import float32_rows
from . import kernels


def plain(table) -> bool:
    """Whether `table`'s touch of held rows is only count, step and dirty mark."""
    return not (table.row_cap or table.spec.ttl_s or table.watch is not None)


def _may_apply(table, keys: np.ndarray) -> bool:
    return bool(keys.size and table.index.size and plain(table))


def pull(table, keys: np.ndarray) -> torch.Tensor | None:
    """The rows of `keys` [n, dim], touched as a pull touches them; None when the one pass
    does not apply."""
    if not _may_apply(table, keys):
        return None
    index = table.index
    rows = kernels.pull_held(index.entries, keys, index._shift, index._mask, table.counts,
                             table.steps, table.pushes, table.dirty, arrays(table)[0])
    if rows is None:
        return None
    table.tick += 1
    return torch.from_numpy(rows)


def push(table, keys: np.ndarray, grads: torch.Tensor) -> bool:
    """Apply `grads` to the rows of sorted distinct `keys` with the table's row optimizer
    (its arithmetic: `RowOptimizer.apply`) and move the counters as the general path does;
    False, having changed nothing, when the one pass does not apply."""
    if not _may_apply(table, keys):
        return False
    opt = table.optimizer
    is_sgd = opt.name == "sgd"
    lr = opt.lr if is_sgd else opt.lr / (1 + table.step * opt.lr_decay)  # clr of step + 1
    table._unshare()
    weights, accum = arrays(table)
    g = float32_rows(grads)
    index = table.index
    done = kernels.push_held(index.entries, keys, index._shift, index._mask, table.counts,
                             table.steps, table.pushes + 1, table.dirty, weights,
                             weights if is_sgd else accum, g, lr, opt.eps, is_sgd)
    if done < 0:
        return False
    table.step += 1
    table.pushes += 1
    table.tick += 1
    return True


def arrays(table) -> tuple[np.ndarray, np.ndarray | None]:
    """numpy views of the table's weights and accumulator (None without one)."""
    return table.views.of(table.weights, table.accum)


class NumpyViews:
    """A table's numpy views of its weights and accumulator, made once per pair of tensors
    (`.numpy()` costs about 5,000 instructions a call). Every change of either tensor is a new
    object (growth, copy on write, restore), which the identity test sees; those paths also
    `drop` the views at once, not to keep old memory alive."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept = None

    def of(self, w: torch.Tensor, a: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray | None]:
        kept = self._kept
        if kept is None or kept[0] is not w or kept[1] is not a:
            kept = self._kept = (w, a, w.numpy(), None if a is None else a.numpy())
        return kept[2], kept[3]

    def drop(self) -> None:
        self._kept = None
