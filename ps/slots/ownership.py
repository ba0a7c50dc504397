"""Which hash slots this PS serves, and the refusals that follow (docs/ps.md, "Slots and resize").

The master's layout (pswire.slots.Layout) gives each PS index a set of slots; a row lives in
the slot its id hashes to, a dense tensor in the slot its name hashes to. A PS serves a request
only when it owns every slot the request touches:

- a slot it does not own: refused FAILED_PRECONDITION, reason WRONG_OWNER, naming the layout
  version this PS knows, so the client asks the master for a newer layout and re-routes;
- a slot it owns but is handing over (frozen: its rows and tensors were exported to the new
  owner, which the master has not confirmed yet): reads are served (nothing changes there),
  writes are refused UNAVAILABLE, reason SLOT_MOVING, and the client retries them shortly.

Checked under the store's gate, shared (ps/store/params.py): a freeze or a release takes it exclusive,
so a request sees the ownership before or after, never half-way.

A PS started without a master owns `Layout.initial(num_ps)`'s share of its index, at version 0.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from pswire.jit import check_owned
from pswire.slots import DEFAULT_SLOTS, Layout, SlotRange, row_slot, tensor_slot
from rpckit.errors import Reason, ServiceError


class WrongOwner(ServiceError):
    """A request touched a slot this PS does not own: `layout_version` is the version it knows
    (the data plane puts it in `DataResponse.layout_version`)."""

    def __init__(self, message: str, layout_version: int):
        super().__init__("FAILED_PRECONDITION", Reason.WRONG_OWNER, message)
        self.layout_version = layout_version


def slot_moving(message: str) -> ServiceError:
    return ServiceError("UNAVAILABLE", Reason.SLOT_MOVING, message)


def ranges_mask(ranges: Iterable[SlotRange | tuple[int, int]], num_slots: int) -> np.ndarray:
    mask = np.zeros(num_slots, dtype=bool)
    for span in ranges:
        start, end = (span.start, span.end) if isinstance(span, SlotRange) else span
        mask[int(start):int(end)] = True
    return mask


def mask_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """The runs of True in `mask` as (start, end) pairs (end exclusive)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


class Ownership:
    """The slots one PS owns, those it is handing over, and the layout version it knows."""

    def __init__(self, index: int, owned: np.ndarray, version: int = 0):
        self.index = index
        self.num_slots = int(owned.size)
        self.owned = owned.astype(bool, copy=True)
        self.frozen = np.zeros(self.num_slots, dtype=bool)
        self.version = int(version)
        self.all_owned = bool(self.owned.all())
        self.frozen_any = False
        # per slot, the newest slot-move attempt the master rolled back (ps/slots/moves.py)
        self.aborted = np.zeros(self.num_slots, dtype=np.int64)
        # slots whose rows and tensors a move wrote here before the master's commit: held, not
        # served; checkpoints record them, so a commit the master made survives this PS
        self.incoming = np.zeros(self.num_slots, dtype=bool)
        # restored from a file: the first layout from the master settles `incoming` (owned
        # now: kept; not: the move rolled back, freed) even at the version the file knew
        self.settle = False
        self._tensor_slots: dict[str, int] = {}  # name -> slot, cached (blake2b per name)
        # tensors found owned and not frozen since the last freeze, thaw or assign: a step
        # names the same ones every time, checked then as one set test
        self._clear: set[str] = set()

    @classmethod
    def initial(cls, index: int, num_ps: int, num_slots: int = DEFAULT_SLOTS) -> "Ownership":
        """Index `index`'s share of the first layout of `num_ps` PS (version 0: no master
        said it yet)."""
        layout = Layout.initial(max(num_ps, index + 1), num_slots, version=0)
        return cls(index, ranges_mask(layout.ranges(index), num_slots), 0)

    # -- reads ----------------------------------------------------------------------------------

    def tensor_slot(self, name: str) -> int:
        slot = self._tensor_slots.get(name)
        if slot is None:
            slot = self._tensor_slots[name] = tensor_slot(name, self.num_slots)
        return slot

    def row_share(self, max_rows: int) -> int:
        """This PS's share of a table's `max_rows` (0: no cap) under the layout it knows: the
        cap times the fraction of the slots it owns, rounded up, so the rows served over all
        PS never exceed max_rows plus the PS count. At least 1: a PS owning no slot holds no
        row it serves (0 would mean no cap)."""
        if not max_rows:
            return 0
        owned = int(self.owned.sum())
        return max(1, -(-max_rows * owned // max(1, self.num_slots)))

    def row_slots(self, ids) -> np.ndarray:
        keys = ids.numpy() if hasattr(ids, "numpy") else np.asarray(ids, dtype=np.int64)
        return row_slot(keys, self.num_slots)

    # -- the checks (call under the store's gate, shared) ----------------------------------------

    def check(self, tensors_w=(), rows_w=(), tensors_r=(), rows_r=()) -> str:
        """Raise WrongOwner unless this PS owns every slot of the tensors and (table, ids)
        rows given; return what of the written ones (`_w`) is being handed over ('' when
        nothing): the caller decides whether that refuses (SLOT_MOVING). Each id set is
        hashed once."""
        if self.all_owned and not self.frozen_any:
            return ""
        moving = ""
        clear = self._clear
        if not (clear.issuperset(tensors_w) and clear.issuperset(tensors_r)):
            for names, write in ((tensors_w, True), (tensors_r, False)):
                for name in names:
                    slot = self.tensor_slot(name)
                    if not self.owned[slot]:
                        raise self._wrong(f"tensor {name!r} (slot {slot})")
                    if not self.frozen[slot]:
                        clear.add(name)
                    elif write and not moving:
                        moving = f"tensor {name!r}"
        for rows, write in ((rows_w, True), (rows_r, False)):
            for table, ids in rows:
                if not len(ids):
                    continue
                keys = ids.numpy() if hasattr(ids, "numpy") else np.asarray(ids, np.int64)
                look = write and not moving and self.frozen_any
                bad, frozen = check_owned(np.ascontiguousarray(keys, np.int64).reshape(-1),
                                          self.num_slots, self.owned, self.frozen, look)
                if bad >= 0:
                    slot = int(self.row_slots(keys[bad:bad + 1])[0])
                    raise self._wrong(f"row {int(keys[bad])} of table {table!r} (slot {slot})")
                if frozen:
                    moving = f"rows of table {table!r}"
        return moving

    def moving_error(self, what: str) -> ServiceError:
        return slot_moving(f"PS {self.index} is handing the slots of {what} over to another "
                           "PS; retry shortly")

    def _wrong(self, what: str) -> WrongOwner:
        return WrongOwner(f"{what} is not on PS {self.index} at layout version {self.version}: "
                          "its slot moved; ask the master (ListPS) and re-route", self.version)

    # -- changes (under the store's gate, exclusive) -------------------------------------------

    def freeze(self, slots: np.ndarray) -> None:
        self._clear = set()
        self.frozen[slots] = True
        self.frozen_any = True

    def thaw(self, slots: np.ndarray) -> None:
        self._clear = set()
        self.frozen[slots] = False
        self.frozen_any = bool(self.frozen.any())

    def assign(self, owned: np.ndarray, version: int) -> None:
        """Own exactly `owned` from layout `version` on (frozen slots no longer owned thaw)."""
        if owned.size != self.num_slots:
            raise ValueError(f"a layout of {owned.size} slots, this PS has {self.num_slots}")
        self._clear = set()
        self.owned = owned.astype(bool, copy=True)
        self.version = int(version)
        self.all_owned = bool(self.owned.all())
        self.thaw(np.flatnonzero(~self.owned))
