"""Moving hash slots between PS while they serve: a store's side of a slot move.

The master drives a move (master/ps/mover.py) one batch of slots from one PS index to another:

1. the new owner asks the old one for the slots (`export`, a data-plane `slot_export`): under
   the store's exclusive gate the old owner freezes them (writes to them are refused
   SLOT_MOVING from now; reads go on, since nothing changes there) and answers their rows,
   dense tensors and optimizer state, with the model's declaration (not its at-most-once
   marks: they stay with it, see `export`);
2. the new owner installs them (`install`, a `slot_import` that goes through its replication
   order, so its backups hold them too) without owning the slots yet;
3. the master commits the layout with the new owners (the version goes up) and tells both
   (`apply_layout`): the new owner serves the slots, the old one frees them and refuses
   requests for them with WRONG_OWNER naming the new version.

Before step 3 the old owner is authoritative: a failure anywhere rolls the move back (`abort`:
the old owner thaws, the new one drops what it installed) and the master tries again. Each
process also applies the master's layout from its periodic ListPS (ps/registrar.py), so a PS
that missed the master's word converges, and a backup promoted to primary takes the layout
before it serves.
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from pswire.slots import row_slot
from pswire.tables import RETUNABLE, TableSpec, spec_changes
from rpckit.errors import Reason, ServiceError, invalid, precondition

from ..store.dense import Dense
from ..store.optim import restore_dense
from ..store.snapshots import _cloned
from ..store.tables import files
from .ownership import Ownership


def _in(mask: np.ndarray, num_slots: int):
    """ids -> whether each id's hash slot is in `mask`."""
    return lambda ids: mask[row_slot(ids, num_slots)]


def _check_slots(store, slots) -> np.ndarray:
    own = store.ownership
    slots = np.asarray(slots, dtype=np.int64)
    if not slots.size or slots.min() < 0 or slots.max() >= own.num_slots:
        raise invalid(f"slot moves name slots in 0..{own.num_slots - 1}, got "
                      f"{slots[:4].tolist()}")
    return np.unique(slots)


def export(store, slots, version: int, attempt: int = 0, handover: bool = True) -> dict:
    """Everything in `slots` (copies). The copy (`handover` False): the rows, taken while the
    slots keep serving, each table watching from then on what changes in them. The hand-over
    (step 1's end): under the exclusive gate the slots freeze, and the rows changed since that
    attempt's copy (all of them when it made none), the ids evicted since and the dense tensors
    are answered. Slots this PS does not own are refused
    WRONG_OWNER, an attempt already rolled back MOVE_ABORTED; frozen slots are exported
    again (a retried move: nothing changed in them since)."""
    slots = _check_slots(store, slots)
    hold = store.gate.exclusive() if handover else store.gate.shared()
    with hold:
        own = store.ownership
        if not own.owned[slots].all():
            missing = int(slots[~own.owned[slots]][0])
            raise own._wrong(f"slot {missing}")
        if attempt and (own.aborted[slots] >= attempt).any():
            raise ServiceError("ABORTED", Reason.MOVE_ABORTED, f"slot move attempt {attempt} "
                               "was rolled back already: not freezing its slots again")
        mask = np.zeros(own.num_slots, dtype=bool)
        mask[slots] = True
        within = _in(mask, own.num_slots)
        state = {"slots": slots, "version": int(version), "initialized": store.initialized,
                 "optimizer": store.optimizer_cfg, "dense": [], "applied": []}
        if not handover:
            state["tables"] = [
                {"spec": asdict(t.spec), "optimizer": dict(store.table_cfgs[name]),
                 **files.slot_rows(t, within, watch=attempt or -1)}
                for name, t in sorted(store.tables.items())]
            return state
        own.freeze(slots)
        for name, d in sorted(store.dense.items()):
            if not mask[own.tensor_slot(name)]:
                continue
            with d.lock:
                optim = d.optimizer.state_dict()
                state["dense"].append({"name": name, "value": d.value.detach().clone(),
                                       "version": d.version, "pushes": d.pushes,
                                       "optim": _cloned(optim)})
        state["tables"] = [
            {"spec": asdict(t.spec), "optimizer": dict(store.table_cfgs[name]),
             **files.watched_rows(t, within, attempt or -1)}
            for name, t in sorted(store.tables.items())]
        # no at-most-once marks: a mark (client, seq) says this PS applied *its part* of
        # that seq, and a client sends one seq to every PS of a call, each its own part; the
        # new owner taking it would answer its own part of that seq, still in flight to it,
        # as a duplicate and apply nothing. A retry of a part applied here comes back here
        # (the same seq only ever goes to the same index), refused as applied before the move
        return state


def install(store, state: dict) -> dict:
    """Write an export into this store without owning its slots yet: step 2 above. A store
    never initialized takes the model's declaration from it; one holding another model is
    refused MODEL_MISMATCH. An export from the network is checked whole first
    (ps.slots.wire.decode), so a refusal here comes before anything changes. Returns
    {rows, tensors}."""
    own = store.ownership
    slots = np.asarray(state["slots"], dtype=np.int64)
    with store.gate.exclusive():
        if own.owned[slots].any():
            raise precondition(Reason.MODEL_MISMATCH, f"PS {store.index} already owns slot "
                               f"{int(slots[own.owned[slots]][0])} of this move")
        if not store.initialized and state["initialized"]:
            store.declare({}, state["optimizer"], ())
        elif state["initialized"] and state["optimizer"] != store.optimizer_cfg:
            raise precondition(Reason.MODEL_MISMATCH, f"PS {store.index} holds another "
                               f"optimizer ({store.optimizer_cfg}) than the moved slots' "
                               f"({state['optimizer']})")
        specs = [TableSpec(**row["spec"]) for row in state["tables"]]
        for spec in specs:  # every table checked before any is created
            table = store.tables.get(spec.name)
            # bounds (RETUNABLE) may differ for a moment while a retune reaches every PS:
            # the rows mean the same, and this PS keeps the bounds it was given
            changes = [] if table is None else [
                c for c in spec_changes(table.spec, spec) if c[0] not in RETUNABLE]
            if changes:
                field, held, moved = changes[0]
                raise precondition(Reason.MODEL_MISMATCH, f"table {spec.name!r} differs: "
                                   f"{field} {held!r} on PS {store.index}, {moved!r} in "
                                   "the move")
        for spec, row in zip(specs, state["tables"]):
            store.add_table(spec, row["optimizer"])
        rows = 0
        for row in state["tables"]:
            table = store.tables[row["spec"]["name"]]
            if row.get("gone") is not None:  # evicted on the old owner since the copy
                files.drop_ids(table, row["gone"].numpy())
            files.import_rows(table, row)
            rows += int(row["ids"].numel())
        for row in state["dense"]:
            if isinstance(row, Dense):  # built and checked by ps.slots.wire.decode
                store.install_dense(row)
                continue
            value = row["value"].contiguous()
            store.install_dense(Dense(
                row["name"], value, restore_dense(store.optimizer_cfg, value, row["optim"]),
                version=int(row["version"]), pushes=int(row["pushes"])))
        # marks an export carries (an older old owner's) are not taken: see `export`
        own.incoming[slots] = True
        return {"rows": rows, "tensors": len(state["dense"])}


def apply_layout(store, owned: np.ndarray, version: int) -> dict:
    """Own exactly `owned` as of layout `version` (older versions change nothing): the data of
    slots no longer owned is freed (step 3 on the old owner), slots newly owned are served
    (step 3 on the new owner). Returns {released, taken, rows_freed, tensors_freed}."""
    unchanged = {"released": 0, "taken": 0, "rows_freed": 0, "tensors_freed": 0}
    # every ListPS check (ps/registrar.py) comes here: an old version must not pause the
    # requests for the exclusive gate
    if version <= store.ownership.version and not store.ownership.settle:
        return unchanged
    with store.gate.exclusive():
        own = store.ownership
        if version <= own.version and not own.settle:  # a concurrent call got here first
            return unchanged
        if owned.size != own.num_slots:  # the job's --ps-slots, first heard from the master
            own = _resized(store, owned.size)
        version = max(version, own.version)
        gone = own.owned & ~owned
        if own.settle:
            # restored from a file: what a move wrote here and the master's layout does not
            # give never committed (a live PS keeps it: an import in flight may commit at a
            # later version than this one, and a roll-back frees it with ABORT)
            gone |= own.incoming & ~owned
        taken = int((owned & ~own.owned).sum())
        own.assign(owned, version)
        own.incoming = np.zeros_like(owned) if own.settle else own.incoming & ~owned
        own.settle = False
        freed = _free(store, gone) if gone.any() else (0, 0)
        resplit_caps(store)
        return {"released": int(gone.sum()), "taken": taken, "rows_freed": freed[0],
                "tensors_freed": freed[1]}


def resplit_caps(store) -> int:
    """Each capped table's share of its `max_rows` follows the slots this PS owns now
    (`Ownership.row_share`): after a layout change, a PS holding more rows than its new share
    evicts down to it at once (cause `cap`), so the rows served over all PS stay within
    max_rows plus the PS count however the PS count changed. Under the exclusive gate.
    Returns the rows evicted."""
    evicted = 0
    for table in store.tables.values():
        share = store.ownership.row_share(table.spec.max_rows)
        if share != table.row_cap:
            evicted += table.reshare(share)
    return evicted


def _resized(store, num_slots: int):
    """A PS that knew another slot count (pswire.slots.DEFAULT_SLOTS until the master said):
    from now on it reads what it holds through the master's count, as if it held every slot,
    so what the layout does not give it is freed. A checkpoint records its count, so only a
    PS that never took part in a move gets here."""
    fresh = Ownership(store.index, np.ones(num_slots, dtype=bool), 0)
    store.set_ownership(fresh)
    return fresh


def abort(store, slots, attempt: int = 0) -> dict:
    """Roll a move back on this PS: slots it owns thaw (the old owner serves writes again);
    slots it does not own lose what an install wrote there (the new owner). An export of this
    attempt or an older one arriving later is refused."""
    slots = _check_slots(store, slots)
    with store.gate.exclusive():
        own = store.ownership
        own.aborted[slots] = np.maximum(own.aborted[slots], attempt)
        for t in store.tables.values():
            with t.lock:
                t.unwatch()
        mine = slots[own.owned[slots]]
        own.thaw(mine)
        theirs = np.zeros(own.num_slots, dtype=bool)
        theirs[slots[~own.owned[slots]]] = True
        own.incoming[theirs] = False
        rows, tensors = _free(store, theirs) if theirs.any() else (0, 0)
        return {"thawed": int(mine.size), "rows_freed": rows, "tensors_freed": tensors}


def _free(store, mask: np.ndarray) -> tuple[int, int]:
    """Under the exclusive gate: drop the rows and tensors of the slots in `mask`."""
    own = store.ownership
    rows = sum(files.drop_rows(t, _in(mask, own.num_slots)) for t in store.tables.values())
    names = [n for n in store.dense if mask[own.tensor_slot(n)]]
    store.free_dense(names)
    return rows, len(names)
