"""id -> row place: an open-addressing hash table in numpy arrays.

Lookups, inserts and deletes take a batch of ids and cost O(batch) on average, whatever the
table's size (linear probing at a load factor of at most one half), with no per-id Python
work and no copy of the key array (the sorted index it replaces copied the whole key array on
every insert batch). Lookups and inserts, on every request, are compiled loops
(ps/store/tables/kernels.py); deletes, on eviction only, are vectorized numpy. Deletes leave
tombstones; the arrays are rebuilt (O(size), amortized over the inserts that filled them) when
live keys and tombstones together pass half the capacity.
"""
from __future__ import annotations

import numpy as np

from . import kernels

EMPTY = -1
TOMBSTONE = -2
MAX_LOAD = 0.5
_MULT = kernels._FIB  # Fibonacci hashing's multiplier: the numpy probe and the compiled one agree


def keys_of(ids) -> np.ndarray:
    """A batch of ids (a 1-D int64 numpy array, as the data plane decodes them, or a CPU torch
    tensor, as the store's other callers hand them) as the numpy array the loops take, without
    a copy. The data plane's are numpy from the start: a tensor made and `.numpy()`ed at each
    step of a request cost more than the loops over its ids."""
    return ids if isinstance(ids, np.ndarray) else ids.numpy()


class RowIndex:
    """Maps distinct non-negative int64 ids to int64 places.

    Each hash position holds its key and its place side by side (`entries`, [capacity, 2]):
    one cache miss per probe instead of two.
    """

    def __init__(self, expected: int = 0) -> None:
        self._alloc(_capacity_for(expected))
        self.size = 0
        self.tombstones = 0

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self.entries.nbytes

    def _alloc(self, capacity: int) -> None:
        self.entries = np.full((capacity, 2), EMPTY, dtype=np.int64)
        self._shift = np.uint64(64 - (capacity.bit_length() - 1))
        self._mask = capacity - 1

    def _home(self, ids: np.ndarray) -> np.ndarray:
        # Fibonacci hashing: the top bits of id * 2**64/phi. A uint64 array multiply wraps
        # silently (no overflow warning for arrays); capacity >= 16, so the shift is < 64
        h = np.ascontiguousarray(ids, dtype=np.int64).view(np.uint64) * _MULT
        h >>= self._shift
        return h.view(np.int64)

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Where each id's key is, -1 where absent."""
        if not ids.size or not self.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        return self._probe(ids, self._home(ids))

    def _probe(self, want: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Where each id of `want` is, probing from `pos` on; -1 where absent."""
        out = np.full(want.shape, -1, dtype=np.int64)
        active = np.arange(want.size)
        while active.size:
            k = self.entries.take(pos, axis=0)[:, 0]
            hit = k == want
            out[active[hit]] = pos[hit]
            go = ~(hit | (k == EMPTY))
            active, want, pos = active[go], want[go], (pos[go] + 1) & self._mask
        return out

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The place of each id, -1 where absent: one compiled pass (ps/store/tables/kernels.py)."""
        if not ids.size or not self.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        keys = np.ascontiguousarray(ids, dtype=np.int64)
        return kernels.lookup(self.entries, keys, self._shift, self._mask)

    def lookup_reference(self, ids: np.ndarray) -> np.ndarray:
        """`lookup` in numpy (what the compiled loop is tested against)."""
        return self._positions_places(ids)

    def _positions_places(self, ids: np.ndarray) -> np.ndarray:
        pos = self._positions(ids)
        out = np.full(ids.shape, -1, dtype=np.int64)
        found = pos >= 0
        out[found] = self.entries[pos[found], 1]
        return out

    def insert(self, ids: np.ndarray, places: np.ndarray) -> None:
        """Add absent, distinct ids with their places."""
        if not ids.size:
            return
        if (self.size + self.tombstones + ids.size) > MAX_LOAD * self.entries.shape[0]:
            self._rebuild(self.size + ids.size)
        self.tombstones -= kernels.insert(self.entries, np.ascontiguousarray(ids, np.int64),
                                          np.ascontiguousarray(places, np.int64), self._shift,
                                          self._mask)
        self.size += ids.size

    def delete(self, ids: np.ndarray) -> np.ndarray:
        """Remove the ids (distinct) that are present; returns their places (-1 for absent
        ones)."""
        pos = self._positions(ids)
        found = pos >= 0
        places = np.full(ids.shape, -1, dtype=np.int64)
        where = pos[found]
        places[found] = self.entries[where, 1]
        self.entries[where, 0] = TOMBSTONE
        self.size -= where.size
        self.tombstones += where.size
        return places

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, places) of every key, in no particular order."""
        live = self.entries[:, 0] >= 0
        return self.entries[live, 0], self.entries[live, 1]

    def _rebuild(self, needed: int) -> None:
        ids, places = self.items()
        self._alloc(_capacity_for(needed))
        self.size = 0
        self.tombstones = 0
        self.insert(ids, places)


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
