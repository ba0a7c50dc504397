"""Row ids on their way to the PS: checked and cut by the layout once per batch, not per call.

A step sends each batch's distinct ids twice: their rows are pulled (the prefetch), and a step
later their gradients are pushed. Both calls used to convert, check and hash the same ids. The
distinct ids are made by the SDK itself (`unique_inverse`) and never handed to the caller, so
they carry what was learnt about them: `mark` checks them once (they are sorted: the ends are
their bounds) and keeps their numpy view and a `parts.SplitMemo`. A marked tensor written in
place since (its `_version` moved) is treated as any other.
"""
from __future__ import annotations

import numpy as np
import torch

from pswire import jit
from pswire.partition import check_row_ids

from .parts import SplitMemo

_ATTR = "_elastic_ps_ids"


class _Known:
    __slots__ = ("version", "array", "memo")

    def __init__(self, version: int, array: np.ndarray):
        self.version, self.array, self.memo = version, array, SplitMemo()


def unique_inverse(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted distinct ids, the position of each id among them), as `torch.unique(ids,
    return_inverse=True)` of the flattened ids answers. int64 ids go through a compiled hash
    table (`pswire.jit.unique_inverse`: 6,656 ids of a CTR batch in 20 against 97 us for
    torch's sort, which numpy's is 3-4x slower than); other dtypes through torch."""
    flat = ids.reshape(-1)
    if flat.dtype != torch.int64:
        return torch.unique(flat, return_inverse=True)
    unique, inverse = jit.unique_inverse(flat.contiguous().numpy())
    return torch.from_numpy(unique), torch.from_numpy(inverse)


def mark(unique: torch.Tensor) -> torch.Tensor:
    """Check the sorted distinct int64 ids `unique` (as `check_row_ids`: ValueError when out of
    bounds) and remember them as checked; returns `unique`."""
    array = unique.numpy()
    if array.size:
        check_row_ids([int(array[0]), int(array[-1])])  # sorted: the least and the greatest
    setattr(unique, _ATTR, _Known(unique._version, array))
    return unique


def prepared(ids) -> tuple[np.ndarray, SplitMemo | None]:
    """`ids` (a tensor or sequence of ints, any shape) as a flat contiguous int64 array,
    checked (ValueError when out of bounds), and the memo of its cut when `mark`ed."""
    known = getattr(ids, _ATTR, None)
    if known is not None and known.version == ids._version:
        return known.array, known.memo
    ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
    check_row_ids(ids)
    return ids.numpy(), None


def subset(ids, at: np.ndarray):
    """The ids at positions `at` (ascending), as a tensor; `mark`ed (checked once) when `ids`
    were, since a subset of sorted distinct ids is sorted and distinct."""
    known = getattr(ids, _ATTR, None)
    array = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).numpy()[at]
    out = torch.from_numpy(array)
    if known is not None and known.version == ids._version:
        setattr(out, _ATTR, _Known(out._version, array))
    return out


def is_marked(ids) -> bool:
    """Whether `ids` are `mark`ed (sorted, distinct, checked) and unchanged since."""
    known = getattr(ids, _ATTR, None)
    return known is not None and known.version == ids._version
