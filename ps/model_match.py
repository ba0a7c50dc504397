"""Whether a declared model is the one a PS holds: the first difference, in words.

A second `InitParameters` must declare the same tensors (shapes, dtypes), optimizer and tables
as the first; `first_difference` names what differs so the refusal (MODEL_MISMATCH) says it.
"""
from __future__ import annotations

import torch

from pswire.frames import DTYPE_NAMES
from rpckit.errors import quote


def first_difference(store, tensors, optimizer, tables) -> str:
    """The first difference between the model `store` holds and the one declared ('' if
    none), quoting at most a short prefix of the client's names."""
    theirs = dict(tensors)
    for name in sorted(set(store.dense) | set(theirs)):
        d, t = store.dense.get(name), theirs.get(name)
        if d is None:
            return f"tensor {quote(name)} is not held here"
        if t is None:
            return f"tensor {quote(name)} {shape_of(d.value)} held here was not declared"
        if t.shape != d.value.shape or t.dtype != d.value.dtype:
            return f"tensor {quote(name)} is {shape_of(d.value)} here, declared {shape_of(t)}"
    if optimizer != store.optimizer_cfg:
        return f"the optimizer is {store.optimizer_cfg} here, declared {optimizer}"
    declared = {spec.name: (spec, cfg) for spec, cfg in tables}
    for name in sorted(set(store.tables) | set(declared)):
        if name not in declared:
            return f"table {quote(name)} held here was not declared"
        spec, cfg = declared[name]
        if name not in store.tables:
            return f"table {quote(name)} is not held here"
        if spec != store.tables[name].spec:
            return f"table {quote(name)} is {store.tables[name].spec} here, declared {spec}"
        if cfg != store.table_cfgs[name]:
            return (f"table {quote(name)} has optimizer {store.table_cfgs[name]} here, "
                    f"declared {cfg}")
    return ""


def shape_of(t: torch.Tensor) -> str:
    return f"{DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)}"
