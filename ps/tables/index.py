"""id -> row slot: an open-addressing hash table in numpy arrays.

Lookups, inserts and deletes take a batch of ids and cost O(batch) on average, whatever the
table's size: every step is vectorized over the batch (linear probing, a few rounds at a load
factor of at most one half), with no per-id Python work and no copy of the key array (the
sorted index it replaces copied the whole key array on every insert batch). Deletes leave
tombstones; the arrays are rebuilt (O(size), amortized over the inserts that filled them) when
live keys and tombstones together pass half the capacity.
"""
from __future__ import annotations

import numpy as np

EMPTY = -1
TOMBSTONE = -2
MAX_LOAD = 0.5
_MULT = np.uint64(0x9E3779B97F4A7C15)


class RowIndex:
    """Maps distinct non-negative int64 ids to int64 slots."""

    def __init__(self, expected: int = 0) -> None:
        self._alloc(_capacity_for(expected))
        self.size = 0
        self.tombstones = 0

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.slots.nbytes

    def _alloc(self, capacity: int) -> None:
        self.keys = np.full(capacity, EMPTY, dtype=np.int64)
        self.slots = np.empty(capacity, dtype=np.int64)
        self._bits = capacity.bit_length() - 1
        self._mask = capacity - 1

    def _home(self, ids: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            h = ids.astype(np.uint64) * _MULT
        return (h >> np.uint64(64 - self._bits)).astype(np.int64) if self._bits else \
            np.zeros(ids.shape, dtype=np.int64)

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Where each id's key is, -1 where absent."""
        out = np.full(ids.shape, -1, dtype=np.int64)
        if not ids.size or not self.size:
            return out
        active = np.arange(ids.size)
        want = ids
        pos = self._home(ids)
        while active.size:
            k = self.keys[pos]
            hit = k == want
            out[active[hit]] = pos[hit]
            go = ~(hit | (k == EMPTY))
            active, want, pos = active[go], want[go], (pos[go] + 1) & self._mask
        return out

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The slot of each id, -1 where absent."""
        pos = self._positions(ids)
        found = pos >= 0
        out = np.full(ids.shape, -1, dtype=np.int64)
        out[found] = self.slots[pos[found]]
        return out

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add absent, distinct ids with their slots."""
        if not ids.size:
            return
        if (self.size + self.tombstones + ids.size) > MAX_LOAD * self.keys.size:
            self._rebuild(self.size + ids.size)
        want, put = ids.astype(np.int64, copy=False), slots.astype(np.int64, copy=False)
        pos = self._home(want)
        while want.size:
            k = self.keys[pos]
            free = np.flatnonzero(k < 0)  # EMPTY or TOMBSTONE: the ids are absent
            if free.size:
                at = pos[free]
                order = np.argsort(at, kind="stable")
                first = np.ones(order.size, dtype=bool)
                first[1:] = at[order][1:] != at[order][:-1]
                won = free[order[first]]  # one id per free position this round
                where = pos[won]
                self.tombstones -= int(np.count_nonzero(self.keys[where] == TOMBSTONE))
                self.keys[where] = want[won]
                self.slots[where] = put[won]
                left = np.ones(want.size, dtype=bool)
                left[won] = False
            else:
                left = np.ones(want.size, dtype=bool)
            want, put, pos = want[left], put[left], (pos[left] + 1) & self._mask
        self.size += ids.size

    def delete(self, ids: np.ndarray) -> np.ndarray:
        """Remove the ids (distinct) that are present; returns their slots (-1 for absent
        ones)."""
        pos = self._positions(ids)
        found = pos >= 0
        slots = np.full(ids.shape, -1, dtype=np.int64)
        where = pos[found]
        slots[found] = self.slots[where]
        self.keys[where] = TOMBSTONE
        self.size -= where.size
        self.tombstones += where.size
        return slots

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, slots) of every key, in no particular order."""
        live = self.keys >= 0
        return self.keys[live], self.slots[live]

    def _rebuild(self, needed: int) -> None:
        ids, slots = self.items()
        self._alloc(_capacity_for(needed))
        self.size = 0
        self.tombstones = 0
        self.insert(ids, slots)


def _capacity_for(n: int) -> int:
    """The power of two that keeps `n` keys at a load of at most a quarter (so that the next
    rebuild is as many inserts away as the last)."""
    capacity = 16
    while capacity * MAX_LOAD / 2 < n:
        capacity *= 2
    return capacity


def distinct_in_order(keys: np.ndarray) -> np.ndarray:
    """The distinct values of `keys` in first-seen order. By a stable sort, not `np.unique`:
    numpy 2.4's unique takes about 1 s for 1 M int64 here, a sort 15 ms."""
    if keys.size < 2:
        return keys.copy()
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.empty(keys.size, dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return keys[np.sort(order[starts])]  # a run's first index is its first occurrence
