"""Whether a declared model is the one a PS holds: the differences, named field by field.

A second `InitParameters` must declare the same tensors (shapes, dtypes), optimizer and tables
as the first; `first_difference` names what differs so the refusal (MODEL_MISMATCH) says it
(`max_rows 1000 -> 2000`: held here -> declared). A table's `max_rows`, `ttl_s`, `ttl_steps`
and `evict` (pswire.tables.RETUNABLE) do not change what a row means, so they are no
mismatch: `adopt_bounds` makes the PS adopt them, and the store writes them to a checkpoint
file before it answers (`ParamStore.file_table_bounds`), so a restart keeps them.
"""
from __future__ import annotations

import logging

import torch

from pswire.frames import DTYPE_NAMES
from pswire.tables import RETUNABLE, TableSpec, spec_changes
from rpckit.errors import quote


log = logging.getLogger(__name__)


def first_difference(store, tensors, optimizer, tables) -> str:
    """The first difference between the model `store` holds and the one declared ('' if
    none) that a running job cannot take, quoting at most a short prefix of the client's
    names."""
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
        changes = dict_changes(store.optimizer_cfg, optimizer)
        return f"the optimizer differs: {changes_text(changes)} (held here -> declared)"
    declared = {spec.name: (spec, cfg) for spec, cfg in tables}
    for name in sorted(set(store.tables) | set(declared)):
        if name not in declared:
            return f"table {quote(name)} held here was not declared"
        spec, cfg = declared[name]
        if name not in store.tables:
            return f"table {quote(name)} is not held here"
        fixed = [c for c in spec_changes(store.tables[name].spec, spec) if c[0] not in RETUNABLE]
        if fixed:
            return (f"table {quote(name)} differs: {changes_text(fixed)} (held here -> "
                    f"declared); of a table only {', '.join(RETUNABLE)} may change on a "
                    "running job")
        if cfg != store.table_cfgs[name]:
            return (f"the optimizer of table {quote(name)} differs: "
                    f"{changes_text(dict_changes(store.table_cfgs[name], cfg))} "
                    "(held here -> declared)")
    return ""


def retuned(store, tables) -> list[tuple[TableSpec, list[tuple]]]:
    """The declared tables (of a model `first_difference` passed) whose `RETUNABLE` fields
    differ from those held, with the changes."""
    out = []
    for spec, _ in tables:
        changes = spec_changes(store.tables[spec.name].spec, spec)
        if changes:
            out.append((spec, changes))
    return out


def adopt_bounds(store, checked) -> str:
    """Under the store's init lock and its gate (shared, so no snapshot sees half of it):
    the store adopts the declared bounds of tables that differ in those alone; returns what
    changed, in words ('' if nothing), which the store files before it is acknowledged
    (`ParamStore.file_table_bounds`)."""
    changes = retuned(store, checked)
    store.retune_tables(changes)
    if not changes:
        return ""
    text = "; ".join(f"table {quote(spec.name)}: {changes_text(c)}" for spec, c in changes)
    log.info("PS %d adopted new table bounds: %s", store.index, text)
    return text


def dict_changes(held: dict | None, declared: dict | None) -> list[tuple]:
    held, declared = held or {}, declared or {}
    return [(k, held.get(k), declared.get(k)) for k in sorted(set(held) | set(declared))
            if held.get(k) != declared.get(k)]


def changes_text(changes: list[tuple]) -> str:
    """`max_rows 1000 -> 2000, evict 'lru' -> 'lfu'` (at most 8 fields)."""
    text = ", ".join(f"{field} {_value(a)} -> {_value(b)}" for field, a, b in changes[:8])
    return text + (f" and {len(changes) - 8} more" if len(changes) > 8 else "")


def _value(v) -> str:
    return repr(v) if isinstance(v, (bool, int, float, type(None))) else quote(v)


def shape_of(t: torch.Tensor) -> str:
    return f"{DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)}"
