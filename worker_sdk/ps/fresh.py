"""Which prefetched rows wait for the worker's next push: the pipelined step, read after write.

A prefetch reads a coming batch's rows while the current one computes, so it cannot see the
push the current step is about to make: the step after computes on rows one push of its own
behind. Only the rows both batches hold are behind, though: the next push updates exactly the
distinct rows of the batch now computing. So the pipeline (worker_sdk/ps/pipeline.py) reads a
coming batch in two parts:

* early, with the push before the current one: the rows the current batch does not hold, which
  no push of this worker changes before the coming step (`late_mask` says which these are);
* late, with the current step's push, in the same `Step` on each PS, after its mutations: the
  rows both batches hold, and the dense tensors (every push changes them). The push itself is
  cut the same way (`split_rows`): its gradients of those rows ride in that Step, the rest in
  a second Step sent once the first is answered (with the next batch's early rows), which the
  loop does not wait for; a first Step refused as stale or failed sends no second.

So one worker computes every step on parameters with all its own pushes, as a local loop, and
waits each step only for the small Step (its dense push, the overlapping rows); the rest of the
push and the next batch's other rows are answered while the step computes.
"""
from __future__ import annotations

import numpy as np
import torch

from pswire import jit

from . import ids as ids_mod


def late_mask(unique: torch.Tensor, pushed_next: torch.Tensor) -> np.ndarray:
    """A bool per id of `unique`: whether it is among the sorted distinct ids `pushed_next`
    (the rows the next push updates: they are read with it)."""
    u, p = unique.numpy(), pushed_next.numpy()
    if not u.size or not p.size:
        return np.zeros(u.size, dtype=bool)
    at = np.minimum(np.searchsorted(p, u), p.size - 1)
    return p[at] == u


def split_rows(rows, late: dict[str, torch.Tensor]):
    """A push's row gradients [(table, ids, grads)] cut into (those of the rows in `late`
    (table -> sorted distinct ids), the rest)."""
    with_reads, rest = [], []
    for table, ids, grad in rows:
        wanted = late.get(table)
        keep = late_mask(torch.as_tensor(ids, dtype=torch.int64).reshape(-1), wanted) \
            if wanted is not None else None
        if keep is None or not keep.any():
            rest.append((table, ids, grad))
            continue
        if keep.all():
            with_reads.append((table, ids, grad))
            continue
        for out, at in ((with_reads, np.flatnonzero(keep)), (rest, np.flatnonzero(~keep))):
            # every id read late is pushed (the usual step): the very tensor that is pulled,
            # so its cut by the layout is made once for both
            same = out is with_reads and at.size == wanted.numel() and ids_mod.is_marked(ids)
            out.append((table, wanted if same else ids_mod.subset(ids, at),
                        grad.index_select(0, torch.from_numpy(at))))
    return with_reads, rest


def split_reads(unique: dict, before: dict):
    """(table -> which of its distinct ids are read late, table -> the ids read early) of a
    prefetch whose distinct ids are `unique` (table -> (ids, inverse)), given those of the
    prefetch before it (`before`, the batch the next push comes from)."""
    empty = torch.empty(0, dtype=torch.int64)
    late = {t: late_mask(u, before.get(t, (empty,))[0]) for t, (u, _) in unique.items()}
    return late, {t: ids_mod.subset(u, np.flatnonzero(~late[t])) for t, (u, _) in unique.items()}


def late_ids(unique: dict, late: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """table -> the ids read late (`split_reads`)."""
    return {t: ids_mod.subset(u, np.flatnonzero(late[t])) for t, (u, _) in unique.items()}


def add_part(parts: dict, late: dict[str, np.ndarray], is_late: bool, rows: dict) -> None:
    """Keep one part's answered rows (table -> rows of its ids) with their positions among
    the distinct ids: parts[table] gets (positions, rows)."""
    empty = torch.empty(0, 0)
    for t, mask in late.items():
        at = np.flatnonzero(mask if is_late else ~mask)
        parts.setdefault(t, []).append((at, rows.get(t, empty)))


def merged(unique: dict, parts: dict) -> dict:
    """table -> (distinct ids, inverse, rows) from both parts. A table with no ids has no
    rows, as when a prefetch is read whole: its forward pulls itself."""
    return {t: (*unique[t], merge(len(unique[t][0]), got)) for t, got in parts.items()
            if len(unique[t][0])}


def merge(count: int, parts: list[tuple[np.ndarray, torch.Tensor]]) -> torch.Tensor:
    """The rows of `count` distinct ids from parts [(their positions, their rows)]."""
    filled = [(at, rows) for at, rows in parts if at.size]
    dim = filled[0][1].shape[1] if filled else 0
    out = torch.empty(count, dim)
    for at, rows in filled:
        jit.place_rows(out.numpy(), at, rows.numpy())
    return out
