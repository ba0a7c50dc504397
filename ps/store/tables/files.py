"""A table's rows to and from checkpoint files: full exports, deltas, restores.

Functions over a `ps.store.tables.table.Table` (its methods `export`, `delta`, `restore`,
`apply_delta` and `rows` call them), kept apart from the request path: what a file holds (the
rows of places [0, high) with their metadata and the table's counters, or only the rows touched
and the ids of filed rows gone since the last file, with the admission counters changed) and
how a table adopts it.
"""
from __future__ import annotations

import numpy as np
import torch

from .eviction import Cause
from .index import RowIndex, distinct_in_order

_META = ("counts", "steps", "ticks", "touched")


class EvictedIds:
    """The ids of a table's rows that the last checkpoint file holds and that left since (one
    entry per row: a row leaves `filed` when it goes, so at most the rows that file holds):
    the next delta lists them."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._count = 0

    def add(self, ids: np.ndarray) -> None:
        self._parts.append(ids)
        self._count += ids.size

    def all(self) -> np.ndarray:
        return np.concatenate(self._parts) if self._parts else np.empty(0, dtype=np.int64)

    def clear(self) -> None:
        self._parts, self._count = [], 0

    @property
    def nbytes(self) -> int:
        return 8 * self._count


def scalars(table, changes: bool = False) -> dict:
    """The table's counters and its admission sketch (with `changes`: only the counters of
    the sketch changed since the last file, AdmissionSketch.changes)."""
    sketch = table.sketch
    if sketch is not None:
        sketch = sketch.changes() if changes else sketch.export()
    return {"step": table.step, "pushes": table.pushes, "tick": table.tick,
            "admitted": table.admitted, "filtered": table.filtered,
            "evictions": {c.value: n for c, n in table.evicted.items()}, "sketch": sketch}


def row_bytes(table) -> int:
    """What one row takes in a file: its weights (and accumulator), id and metadata."""
    floats = table.spec.dim * (1 if table.accum is None else 2)
    return 4 * floats + 8 * (1 + len(_META))


def file_bytes(table) -> int:
    """About what `export` writes: every used place's row and the whole sketch."""
    with table.lock:
        return table.high * row_bytes(table) + (
            0 if table.sketch is None else table.sketch.counters.nbytes)


def export(table, pin=None) -> dict:
    """The rows (call under the store's exclusive gate): places [0, high), free ones with
    id -1. With `pin` (a SnapshotPin) the rows are views of the live ones, valid until the
    pin is released (a change copies them first); without, a copy. Ids and row metadata
    are copied either way (40 bytes a row)."""
    with table.lock:
        n = table.high
        weights, accum = table.weights[:n], None if table.accum is None else table.accum[:n]
        if pin is None:
            weights, accum = weights.clone(), None if accum is None else accum.clone()
        else:
            table.snaps = [p for p in table.snaps if not p.done] + [pin]
        meta = {name: torch.from_numpy(getattr(table, name)[:n].copy()) for name in _META}
        return {"ids": torch.from_numpy(table.ids[:n].copy()), "weights": weights,
                "accum": accum, **meta, **scalars(table)}


def delta(table) -> dict:
    """The rows touched since the last `mark_clean`, the ids of rows that file holds
    that left since, and the sketch's changed counters (call under the store's exclusive
    gate, then `mark_clean`). The rows are copied: a few of them."""
    with table.lock:
        places = np.flatnonzero(table.dirty[: table.high] & (table.ids[: table.high] >= 0))
        at = torch.from_numpy(places)
        evicted = table.evicted_ids.all()
        meta = {name: torch.from_numpy(getattr(table, name)[places]) for name in _META}
        return {"delta": True, "ids": torch.from_numpy(table.ids[places]),
                "weights": table.weights.index_select(0, at),
                "accum": None if table.accum is None else table.accum.index_select(0, at),
                "evicted_ids": torch.from_numpy(evicted), **meta,
                **scalars(table, changes=True)}


def left(table, places: np.ndarray, gone: np.ndarray) -> None:
    """Under table.lock: rows at `places` (of ids `gone`, out of the index) left the table.
    Those the last checkpoint file holds are listed for the next delta; a row created since
    is in no file and needs no mention (so the list never outgrows that file's rows)."""
    filed = table.filed[places]
    if filed.any():
        listed = gone[filed]
        table.evicted_ids.add(listed)
    table.ids[places] = -1
    table.dirty[places] = False
    table.filed[places] = False


def mark_filed(table) -> None:
    """Under table.lock: the table as it is now is what the checkpoint files hold."""
    table.dirty[:] = False
    table.filed[:] = False
    table.filed[: table.high] = table.ids[: table.high] >= 0
    table.evicted_ids.clear()
    if table.sketch is not None:
        table.sketch.mark_filed()


def restore(table, state: dict) -> None:
    """Adopt a full export (a checkpoint's tensors become the table's: no second copy)."""
    ids = state["ids"].numpy().astype(np.int64, copy=True)
    n = ids.size
    if state["weights"].shape != (n, table.spec.dim):
        raise ValueError(f"table {table.spec.name!r}: checkpoint rows have shape "
                         f"{tuple(state['weights'].shape)}, expected ({n}, {table.spec.dim})")
    table.views.drop()  # the numpy views of the old tensors
    table.weights = state["weights"].contiguous()
    if table.accum is not None:
        accum = state.get("accum")
        table.accum = (accum.contiguous() if accum is not None else
                      torch.full((n, table.spec.dim), table.optimizer.initial_accumulator_value))
    table.ids = ids
    table.high = n
    restore_scalars(table, state)
    now = table.clock()
    for name in _META:
        value = state.get(name)
        if value is not None:
            setattr(table, name, value.numpy().copy())
        else:  # a checkpoint from before row metadata: touched now, never counted
            fill = {"steps": table.pushes, "ticks": table.tick, "touched": now}.get(name, 0)
            setattr(table, name, np.full(n, fill, dtype=np.float64 if name == "touched"
                                        else np.int64))
    table.dirty = np.zeros(n, dtype=bool)
    table.filed = np.zeros(n, dtype=bool)
    live = np.flatnonzero(ids >= 0)
    table.free = np.flatnonzero(ids < 0)[::-1].copy()
    table.index = RowIndex(live.size)
    table.index.insert(ids[live], live)
    mark_filed(table)  # what the file holds
    table._reset_deadlines()


def apply_delta(table, state: dict) -> None:
    """Apply a delta (from `delta`) on top of this table: the evicted ids leave, the
    changed rows are written (created where absent)."""
    with table.lock:
        # an id evicted twice since the last file (evicted, admitted, evicted) is listed
        # twice: delete it once
        gone = distinct_in_order(state["evicted_ids"].numpy().astype(np.int64))
        if gone.size:
            places = table.index.delete(gone)
            places = places[places >= 0]
            table.ids[places] = -1
            table.free = np.concatenate([table.free, places])
        _write_rows(table, state["ids"].numpy().astype(np.int64), state)
        restore_scalars(table, state)
        mark_filed(table)  # what the files hold, the next delta's starting point
        table._reset_deadlines()


def _write_rows(table, keys: np.ndarray, state: dict) -> np.ndarray:
    """Under table.lock: write the rows of `keys` (created where absent, overwritten where
    present) from `state`'s weights, accumulators and metadata; returns their positions."""
    places = table.index.lookup(keys)
    absent = np.flatnonzero(places < 0)
    if absent.size:
        n = absent.size
        reused = table.free[-n:][::-1] if table.free.size else table.free
        table.free = table.free[: table.free.size - reused.size]
        fresh = np.arange(table.high, table.high + n - reused.size, dtype=np.int64)
        table._reserve(table.high + fresh.size)
        table.high += fresh.size
        places[absent] = np.concatenate([reused, fresh])
        table.index.insert(keys[absent], places[absent])
    at = torch.from_numpy(places)
    table.weights[at] = state["weights"]
    if table.accum is not None and state.get("accum") is not None:
        table.accum[at] = state["accum"]
    table.ids[places] = keys
    for name in _META:
        getattr(table, name)[places] = state[name].numpy()
    return places


def restore_scalars(table, state: dict) -> None:
    table.step = int(state.get("step", 0))
    table.pushes = int(state.get("pushes", 0))
    table.tick = int(state.get("tick", 0))
    table.admitted = int(state.get("admitted", 0))
    table.filtered = int(state.get("filtered", 0))
    evicted = state.get("evictions")
    if evicted:
        table.evicted = {c: int(evicted.get(c.value, 0)) for c in Cause}
    sketch = state.get("sketch")
    if table.sketch is not None and sketch is not None:
        table.sketch.restore(sketch)


def contents(table) -> dict[int, tuple]:
    """{id: (weights, accum or None, count, step)}: the table's content (for tests and
    comparisons; O(rows) Python objects)."""
    with table.lock:
        out = {}
        for place in table._live():
            out[int(table.ids[place])] = (
                table.weights[place].clone(),
                None if table.accum is None else table.accum[place].clone(),
                int(table.counts[place]), int(table.steps[place]))
        return out


# -- hash-slot moves (ps/slots/moves.py): a row's place in the arrays is its position ------

def slot_rows(table, in_slots, watch: int = 0) -> dict:
    """The rows whose ids `in_slots(ids)` (a boolean mask over ids) selects, copied, with their
    metadata: a delta's shape without the table's counters (a move carries rows, not the
    sending table's counters). `watch`: a slot move's attempt, from which on the table records
    what changes (`watched_rows` gives it), started under the same lock as the copy."""
    with table.lock:
        live = table._live()
        out = _rows_at(table, live[in_slots(table.ids[live])])
        if watch:
            table.watch, table.watch_gone, table.watch_attempt = [], [], watch
        return out


def watched_rows(table, in_slots, attempt: int) -> dict:
    """The rows `in_slots` selects that changed since `slot_rows(..., watch=attempt)`, and the
    ids of theirs evicted since (`gone`); all of them when another attempt (or none) was
    watching. Stops the watch. Call under the store's exclusive gate."""
    with table.lock:
        watched = table.watch is not None and table.watch_attempt == attempt
        changed, gone = table.watch, table.watch_gone
        table.unwatch()
        if not watched:
            live = table._live()
            return {**_rows_at(table, live[in_slots(table.ids[live])]), "delta": False}
        at = np.unique(np.concatenate(changed)) if changed else np.empty(0, dtype=np.int64)
        at = at[table.ids[at] >= 0]
        at = at[in_slots(table.ids[at])]
        gone = np.concatenate(gone) if gone else np.empty(0, dtype=np.int64)
        gone = gone[in_slots(gone)]
        return {**_rows_at(table, at), "delta": True, "gone": torch.from_numpy(gone)}


def _rows_at(table, at: np.ndarray) -> dict:
    index = torch.from_numpy(at)
    meta = {name: torch.from_numpy(getattr(table, name)[at]) for name in _META}
    return {"ids": torch.from_numpy(table.ids[at]),
            "weights": table.weights.index_select(0, index),
            "accum": None if table.accum is None else table.accum.index_select(0, index),
            **meta}


def import_rows(table, state: dict) -> None:
    """Write moved rows into this table (created where absent, overwritten where present),
    marked changed so the next delta checkpoint holds them. The table's counters stay."""
    keys = state["ids"].numpy().astype(np.int64)
    if not keys.size:
        return
    with table.lock:
        table._unshare()
        places = _write_rows(table, keys, state)  # may grow the arrays: index dirty after
        table.dirty[places] = True
        table._reset_deadlines()


def drop_ids(table, ids: np.ndarray) -> int:
    """Free the rows of `ids` that this table holds (evicted on the old owner while a move
    copied them). Returns how many."""
    with table.lock:
        places = table.index.lookup(ids)
        return _drop_at(table, places[places >= 0])


def drop_rows(table, in_slots) -> int:
    """Free the rows `in_slots(ids)` selects (they moved to another PS): listed as removed for
    the next delta checkpoint, not counted as evictions. Returns how many."""
    with table.lock:
        live = table._live()
        return _drop_at(table, live[in_slots(table.ids[live])])


def _drop_at(table, at: np.ndarray) -> int:
    """Under table.lock: free the rows at positions `at`."""
    if not at.size:
        return 0
    gone = table.ids[at].copy()
    table.index.delete(gone)
    table.free = np.concatenate([table.free, at])
    left(table, at, gone)
    table._reset_deadlines()
    return int(at.size)
