"""The one partitioning rule: which PS holds which dense tensor and which embedding row.

The PS and the worker SDK both import this module, so a model is split the same way on every
process. The rule is a pure function of its inputs (no hashing salt, no process state):

- Dense tensors are placed by name, balanced by size: tensors sorted by size (largest first,
  ties by name) go one by one to the PS with the fewest bytes so far (ties: the lowest index).
  The same model (names and sizes) and the same PS count always give the same placement,
  whatever order the tensors are listed in.
- Embedding rows are placed by id: row `id` lives on PS `id % num_ps`.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

# Ids must lie in [0, MAX_ROW_ID]: negative ids are a caller's bug (an overflowed hash, a
# signed cast), and 2**53 - 1 keeps every id exact in a float64 and in JSON.
MAX_ROW_ID = 2**53 - 1


def place_dense(sizes: Mapping[str, int], num_ps: int) -> dict[str, int]:
    """Map each tensor name to its PS index. `sizes` gives bytes (or elements) per tensor."""
    _check_num_ps(num_ps)
    load = [0] * num_ps
    placement: dict[str, int] = {}
    for name, size in sorted(sizes.items(), key=lambda kv: (-int(kv[1]), kv[0])):
        if int(size) < 0:
            raise ValueError(f"tensor {name!r} has a negative size {size}")
        target = min(range(num_ps), key=lambda i: (load[i], i))
        placement[name] = target
        load[target] += int(size)
    return placement


def split_dense(sizes: Mapping[str, int], num_ps: int) -> list[list[str]]:
    """The names each PS holds, per PS index, in sorted order."""
    groups: list[list[str]] = [[] for _ in range(num_ps)]
    for name, index in place_dense(sizes, num_ps).items():
        groups[index].append(name)
    return [sorted(g) for g in groups]


def row_owner(row_id: int, num_ps: int) -> int:
    """The PS index that holds embedding row `row_id`."""
    _check_num_ps(num_ps)
    check_row_ids([row_id])
    return row_id % num_ps


def split_rows(ids, num_ps: int):
    """Split a 1-D int64 tensor of ids by owner: a list, per PS, of (positions, ids).

    `positions` index into `ids`, so answers from each PS can be scattered back in order.
    """
    import torch

    _check_num_ps(num_ps)
    ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
    check_row_ids(ids)
    if num_ps == 1:
        return [(torch.arange(ids.numel()), ids)]
    # numpy: for the few hundred ids of a batch, torch's per-call cost is most of the work
    keys = ids.numpy() if ids.is_contiguous() else ids.contiguous().numpy()
    owners = keys % num_ps
    out = []
    for index in range(num_ps):
        positions = np.flatnonzero(owners == index)
        out.append((torch.from_numpy(positions), torch.from_numpy(keys[positions])))
    return out


def check_row_ids(ids) -> None:
    """Raise ValueError unless every id is in [0, MAX_ROW_ID]."""
    if hasattr(ids, "numel"):
        if ids.numel() == 0:
            return
        keys = ids.numpy() if ids.device.type == "cpu" and not ids.requires_grad else ids
        low, high = int(keys.min()), int(keys.max())
    else:
        ids = list(ids)
        if not ids:
            return
        low, high = min(ids), max(ids)
    if low < 0:
        raise ValueError(f"embedding ids must be >= 0, got {low}")
    if high > MAX_ROW_ID:
        raise ValueError(f"embedding ids must be <= {MAX_ROW_ID} (2**53 - 1), got {high}")


def _check_num_ps(num_ps: int) -> None:
    if not isinstance(num_ps, int) or num_ps < 1:
        raise ValueError(f"num_ps must be a positive int, got {num_ps!r}")


def sizes_of(named_tensors: Iterable) -> dict[str, int]:
    """Bytes per tensor from (name, tensor) pairs, e.g. `model.named_parameters()`."""
    return {name: t.numel() * t.element_size() for name, t in named_tensors}
