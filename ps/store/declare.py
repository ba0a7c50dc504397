"""InitParameters on a PS: the first declaration wins; a later one is checked against it.

A part of the `ParamStore` (ps/store/params.py), handed the store. The first call makes the model
(tensors, optimizer, tables) the PS's. A later call declaring the same model changes nothing;
one declaring another is refused (MODEL_MISMATCH, naming the fields that differ:
ps/store/model_match.py), except new bounds of a table (max_rows, ttl_s, ttl_steps, evict), which
the PS adopts and files in a checkpoint before it answers (`ParamStore.file_table_bounds`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from pswire.frames import DTYPE_NAMES, FLOAT_DTYPES, require_finite
from pswire.optimizers import row_config, validate_dense
from pswire.tables import TableSpec
from rpckit.errors import Reason, invalid, precondition, quote

from .dense import Dense
from .limits import check_names
from .model_match import adopt_bounds, first_difference
from .optim import make_dense


def init_parameters(store, tensors: Sequence[tuple[str, torch.Tensor]], optimizer: dict,
                    tables: Sequence[tuple[TableSpec, dict | None]] = ()
                    ) -> tuple[bool, dict[str, int], str, bool]:
    """`ParamStore.init_parameters`: (initialized_now, versions, message, tables_changed).
    Outside a caller's hold of the gate a change of bounds is filed before this returns;
    a caller holding it files it after releasing it (`ParamStore.file_tables_now`)."""
    names = [name for name, _ in tensors]
    check_names(names, store.limits, "InitParameters")
    for name, t in tensors:
        if not name:
            raise invalid("every tensor needs a name")
        if DTYPE_NAMES.get(t.dtype) not in FLOAT_DTYPES:
            raise invalid(f"tensor {name!r}: dtype {t.dtype} cannot be trained; use "
                          f"{', '.join(FLOAT_DTYPES)}")
        require_finite(t, f"tensor {quote(name)}")
    if len(set(names)) != len(names):
        raise invalid(f"tensor names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    validate_dense(optimizer)
    table_names = [spec.name for spec, _ in tables]
    if len(set(table_names)) != len(table_names):
        raise invalid(f"table names repeat: {table_names}")
    checked = []
    for spec, cfg in tables:
        spec.check()
        checked.append((spec, row_config(cfg, optimizer, spec.name)))
    with store.gate.shared(), store._init_lock:
        store._refuse_if_stopping()
        if not store.initialized:
            _initialize(store, tensors, optimizer, checked)
            return True, store.versions(), "initialized", False
        mismatch = first_difference(store, tensors, optimizer, checked)
        if mismatch:
            raise precondition(Reason.MODEL_MISMATCH, f"PS {store.index} holds another "
                               f"model: {mismatch}. The first InitParameters won; declare "
                               "the model it holds, or start the job with a fresh "
                               "--checkpoint-dir for a new model")
        changed = adopt_bounds(store, checked)
        # a change whose filing failed is reported again, so a primary forwards it
        unfiled = store.tables_unfiled
    if unfiled and not store.gate.held_here():
        store.file_table_bounds()
    message = (f"already initialized; adopted {changed}" if changed
               else "already initialized with this model")
    return False, store.versions(), message, unfiled


def _initialize(store, tensors, optimizer: dict, checked) -> None:
    """Under the init lock: the first InitParameters' model becomes the PS's."""
    dense = {}
    for name, t in tensors:
        value = t.detach().clone().contiguous()
        dense[name] = Dense(name, value, make_dense(optimizer, value))
    store.declare(dense, optimizer, checked)
