"""Consistent snapshots of a ParamStore without stalls or copies, and restoring one.

A snapshot view is taken under the store's exclusive gate and only takes references: the live
tensors, optimizer states and table rows, pinned. The first change to a pinned tensor or table
while a view is open copies it first (copy on write), so a checkpoint or a backup's copy reads
the state at the snapshot while pushes and pulls go on. A `ParamStore` holds one (`store.snapshots`).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import asdict

import torch

from .dense import Dense
from pswire.tables import TableSpec

from .tables import files
from .optim import restore_dense
from ..slots.ownership import Ownership, mask_ranges, ranges_mask

FORMAT = 1


class SnapshotPin:
    """Marks memory an open snapshot view still reads: until `release`, the next change to it
    copies first."""

    def __init__(self) -> None:
        self._released = threading.Event()

    @property
    def done(self) -> bool:
        return self._released.is_set()

    def release(self) -> None:
        self._released.set()


class Snapshots:
    """Snapshot and restore of a `ParamStore`: a part of the store, handed the store whose
    tensors, tables, gate and tables of applied requests it reads and replaces."""

    def __init__(self, store) -> None:
        self.store = store

    def copy_for_snapshot(self, d: Dense) -> None:
        """Under d.lock: move the tensor and its optimizer state to fresh memory, leaving what
        the snapshot view references untouched (Dense.copy_state)."""
        d.copy_state()
        with self.store._stats_lock:
            self.store.stats.snapshot_copies += 1

    def snapshot(self) -> dict:
        """A consistent, self-contained copy of everything a restart needs (pushes entirely
        in or out). The copy is made outside every lock, from a pinned view."""
        with self.snapshot_view() as state:
            return _cloned(state)

    @contextmanager
    def snapshot_view(self, delta: bool = False, clean: bool = False):
        """A consistent view of everything a restart needs, valid inside the `with`: its
        tensors are the live ones, pinned (a push copies a pinned tensor or table before
        changing it). Taken under the exclusive gate, which it holds only for that.
        `delta`: tables hold only what changed since the last checkpoint file
        (ps.store.tables.table.Table.delta), unless that would be no smaller than their rows: the
        view's "delta" says which it is, and "why_full" (then) why it is a full view though a
        delta was asked (no part of the state: pop it before writing); `clean`: this view
        becomes that file (a checkpoint's). Decided, taken and marked clean under the
        exclusive gate, which every change to a table holds shared (pushes, and the reads
        that change it)."""
        pin = SnapshotPin()
        try:
            with self.store.gate.exclusive():
                state = self._view_locked(pin, delta)
                why = ""
                if delta:
                    why = _delta_not_smaller(state["tables"], self.store.tables)
                    if why:
                        state = self._view_locked(pin, False)
                state["delta"] = delta and not why
                if why:
                    state["why_full"] = why
                if clean:
                    for t in self.store.tables.values():
                        t.mark_clean()
            yield state
        finally:
            pin.release()

    def _view_locked(self, pin: SnapshotPin, delta: bool = False) -> dict:
        dense = []
        for name in sorted(self.store.dense):
            d = self.store.dense[name]
            with d.lock:
                d.pin_snapshot(pin)
                optim = d.optimizer.state_dict()
                # state_dict shares each parameter's state dict: copy the dicts (not the
                # tensors), so a copy on write replacing an entry does not reach the view
                optim["state"] = {k: dict(v) for k, v in optim["state"].items()}
                dense.append({"name": name, "value": d.value.detach(), "version": d.version,
                              "pushes": d.pushes, "optim": optim})
        tables = []
        for name in sorted(self.store.tables):
            t = self.store.tables[name]
            tables.append({"spec": asdict(t.spec), "optimizer": dict(self.store.table_cfgs[name]),
                           **(t.delta() if delta else t.export(pin))})
        return {
            "format": FORMAT, "index": self.store.index, "num_ps": self.store.num_ps,
            "initialized": self.store.initialized, "optimizer": self.store.optimizer_cfg,
            "dense": dense, "tables": tables, "applied": self.store.applied.export(),
            "stats": {"pushes": self.store.stats.pushes, "row_pushes": self.store.stats.row_pushes},
            # the hash slots this state holds (ps/slots/ownership.py): a restore owns them until
            # the master's layout says otherwise
            "layout": {"version": self.store.ownership.version,
                       "num_slots": self.store.ownership.num_slots,
                       "owned": mask_ranges(self.store.ownership.owned),
                       # moved here, not yet committed: kept until the master's layout says
                       "incoming": mask_ranges(self.store.ownership.incoming)},
        }

    def restore(self, state: dict) -> None:
        """Replace everything with a snapshot (at start, before serving)."""
        self._check(state)
        self._own(state)  # before the tables: their shares of max_rows follow it
        tables, table_cfgs = {}, {}
        for row in state["tables"]:
            spec = TableSpec(**row["spec"])
            # the table adopts the checkpoint's tensors: no second copy of the rows
            table = self.store.make_table(spec, row["optimizer"], capacity=0)
            table.restore(row)
            tables[spec.name] = table
            table_cfgs[spec.name] = dict(row["optimizer"])
        self._replace(state, tables, table_cfgs)

    def _check(self, state: dict) -> None:
        if state.get("format") != FORMAT:
            raise ValueError(f"checkpoint format {state.get('format')} is not {FORMAT}")
        # the PS count may differ (a resize since): the slots it held say what it holds
        if state["index"] != self.store.index:
            raise ValueError(f"checkpoint is of PS {state['index']} of {state['num_ps']}, this "
                             f"is PS {self.store.index} of {self.store.num_ps}")

    def _own(self, state: dict) -> None:
        """The slots `state` held become this PS's (until the master's layout says)."""
        layout = state.get("layout")
        if layout is not None:
            slots = int(layout["num_slots"])
            own = Ownership(self.store.index, ranges_mask(layout["owned"], slots),
                            layout["version"])
            own.incoming = ranges_mask(layout.get("incoming", []), slots)
            self.store.set_ownership(own)

    def _replace(self, state: dict, tables=None, table_cfgs=None) -> None:
        """The dense part, the applied table and the counters of `state` replace the store's
        (with `tables`, the tables too)."""
        dense = {}
        cfg = state["optimizer"]
        for row in state["dense"]:
            value = row["value"].contiguous()
            opt = restore_dense(cfg, value, row["optim"])
            dense[row["name"]] = Dense(row["name"], value, opt, version=int(row["version"]),
                                       pushes=int(row["pushes"]))
        stats = state.get("stats", {})
        self.store.replace(dense, cfg, state["initialized"], state["applied"],
                           stats.get("pushes", 0), stats.get("row_pushes", 0),
                           tables, table_cfgs)

    def apply_delta(self, state: dict) -> None:
        """Apply a delta view (`snapshot_view(delta=True)`) on top of the restored state: the
        dense part, the applied table and the stats are replaced, the tables' changed rows
        written and evicted rows dropped (at start, before serving)."""
        self._check(state)
        self._own(state)
        self._replace(state)
        for row in state["tables"]:
            spec = TableSpec(**row["spec"])
            # a table declared after the full snapshot is made here
            table = self.store.add_table(spec, row["optimizer"], capacity=0)
            if spec != table.spec:  # new bounds filed with this delta (ParamStore.retune_tables)
                table.retune(spec, self.store.ownership.row_share(spec.max_rows), settle=False)
            table.apply_delta(row)


def _delta_not_smaller(rows: list[dict], tables: dict) -> str:
    """Why the tables' delta `rows` should be a full view instead ('' if not): when what they
    hold is no smaller than the tables' rows and sketches, a full file costs no more and
    starts a new chain."""
    delta = sum(_tensor_bytes(row) for row in rows)
    full = sum(files.file_bytes(t) for t in tables.values())
    if delta < full or not delta:
        return ""
    return (f"the tables' changes since the last file ({delta} bytes) are no smaller than "
            f"their rows ({full} bytes)")


def _tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _cloned(obj):
    """`obj` with every tensor in it cloned (dicts, lists and tuples rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _cloned(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cloned(v) for v in obj)
    return obj
