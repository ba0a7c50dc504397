"""Compiled loops for the per-id work of every request: hashing ids to slots, and the checks
and lookups the PS makes over them.

A request carries a few hundred to a few thousand ids. Vectorized numpy spends most of its
time on such a batch in call overhead: splitmix64 alone is ten array operations (and their
temporaries), a hash-table probe a dozen more. numba compiles each loop here once (cached on
disk, `cache=True`: later processes load it in milliseconds) into one call that touches every
id once: 12 -> 1 us for 1,500 slots, 30 -> 3 us for a lookup (docs/benchmarks.md, issue 27).
`nogil`: a PS's gRPC threads keep running meanwhile.

Every function here has a plain numpy twin elsewhere that the tests compare it with.
"""
from __future__ import annotations

import numba
import numpy as np

# pswire.slots' splitmix64 constants, written again: slots imports this module (for the hash),
# so this one cannot import them from there
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def njit(*args, **kw):
    """numba.njit, cached on disk and releasing the GIL."""
    return numba.njit(*args, cache=True, nogil=True, **kw)


@njit
def splitmix(key):
    """splitmix64's finalizer of one uint64 (pswire.slots.splitmix64's per-element step)."""
    z = np.uint64(key) + GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit
def slot_of(key, num_slots):
    """pswire.slots.row_slot of one id: splitmix64(id) mod num_slots (a mask for a power of
    two, the same answer)."""
    z = splitmix(key)
    n = np.uint64(num_slots)
    if num_slots & (num_slots - 1) == 0:
        return np.int64(z & (n - np.uint64(1)))
    return np.int64(z % n)


@njit
def row_slots(ids, num_slots):
    """pswire.slots.row_slot over int64 `ids` (1-D)."""
    out = np.empty(ids.size, np.int64)
    for i in range(ids.size):
        out[i] = slot_of(ids[i], num_slots)
    return out


@njit
def check_owned(ids, num_slots, owned, frozen, any_frozen):
    """(the position of the first id whose slot `owned` does not hold, or -1; whether any id's
    slot is `frozen`, looked at only when `any_frozen`)."""
    hit_frozen = False
    for i in range(ids.size):
        slot = slot_of(ids[i], num_slots)
        if not owned[slot]:
            return i, hit_frozen
        if any_frozen and frozen[slot]:
            hit_frozen = True
    return -1, hit_frozen


@njit(fastmath={"reassoc"})
def all_finite(values):
    """Whether no value of the 1-D float array is NaN or infinite: one vectorized pass (x * 0
    is 0 for a finite x and NaN otherwise; reassociation lets the sum run in SIMD lanes)."""
    acc = values.dtype.type(0)
    for i in range(values.size):
        acc += values[i] * 0
    return np.isfinite(acc)


@njit
def min_max(values):
    """(smallest, largest) of a non-empty 1-D array, in one pass."""
    low = high = values[0]
    for i in range(1, values.size):
        v = values[i]
        if v < low:
            low = v
        elif v > high:
            high = v
    return low, high



@njit
def flags_only(mask):
    """Whether every byte of the uint8 `mask` is 0 or 1 (a state mask's, pswire.frames)."""
    for i in range(mask.size):
        if mask[i] > 1:
            return False
    return True


def warm_up() -> None:
    """Load (or, once after a change, compile) the loops above, so that a process's first
    requests do not pay for it: a worker calls this when it declares embedding tables."""
    ids = np.arange(2, dtype=np.int64)
    row_slots(ids, 1024)
    owners = np.zeros(1024, dtype=np.int32)
    owners.flags.writeable = False  # as a Layout's: a read-only array is compiled for apart
    group_by_owner(ids, 1024, owners)
    owned = np.ones(1024, dtype=np.bool_)
    check_owned(ids, 1024, owned, owned, True)
    values = np.zeros(2, dtype=np.float32)
    all_finite(values)
    all_finite(values.astype(np.float64))
    min_max(ids)
    flags_only(np.zeros(2, dtype=np.uint8))
    unique_inverse(ids)
    rows = np.zeros((2, 2), dtype=np.float32)
    gather_rows(rows, ids, rows.copy())
    scatter_rows(ids, rows, rows.copy())
    place_rows(rows.copy(), ids, rows)
    rows.flags.writeable = False  # rows answered in a read-only frame
    place_rows(rows.copy(), ids, rows)


def unique_inverse(ids):
    """(the sorted distinct values of int64 `ids` (1-D), the position of each id among them):
    `torch.unique(ids, return_inverse=True)`'s answer. A hash table finds the distinct ids in
    one pass and only those are sorted: a batch's ids repeat (a CTR batch of 6,656 ids has a
    few hundred distinct), so this is 4-5x cheaper than torch's sort of every id. The sort is
    numpy's: numba's own took 84 us for the 2,176 distinct ids of a Criteo-shaped batch of 256,
    numpy's 12 (the whole call went from 150 to about 40 us)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    seen, entry, keys, where = _distinct(ids)
    unique = np.sort(seen)
    return unique, _ranks(unique, entry, keys, where)


@njit
def _distinct(ids):
    """(the distinct ids in first-seen order, each id's entry in the hash table, the table's
    keys and marks): `unique_inverse`'s first half."""
    n = ids.size
    cap = 16
    while cap < 2 * n:
        cap *= 2
    mask = np.uint64(cap - 1)
    keys = np.empty(cap, np.int64)
    where = np.full(cap, -1, np.int32)  # occupied (>= 0); `_ranks` writes each key's rank
    seen = np.empty(n, np.int64)
    entry = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        key = ids[i]
        h = splitmix(key) & mask
        while True:
            if where[h] < 0:
                where[h] = 0
                keys[h] = key
                seen[m] = key
                m += 1
                break
            if keys[h] == key:
                break
            h = (h + np.uint64(1)) & mask
        entry[i] = h
    return seen[:m], entry, keys, where


@njit
def _ranks(unique, entry, keys, where):
    """Each id's position among the sorted distinct `unique`, through the entries `_distinct`
    found: the table's entries are given their key's rank, then read per id."""
    mask = np.uint64(keys.size - 1)
    for r in range(unique.size):
        key = unique[r]
        h = splitmix(key) & mask
        while keys[h] != key:
            h = (h + np.uint64(1)) & mask
        where[h] = r
    inverse = np.empty(entry.size, np.int64)
    for i in range(entry.size):
        inverse[i] = where[entry[i]]
    return inverse


@njit
def gather_rows(rows, inverse, out):
    """out[i] = rows[inverse[i]] (float32 [n, dim] from [m, dim]): an embedding's forward."""
    dim = rows.shape[1]
    for i in range(inverse.size):
        r = inverse[i]
        for j in range(dim):
            out[i, j] = rows[r, j]


@njit
def place_rows(out, positions, values):
    """out[positions[k]] = values[k] (float32 rows): the rows one PS answered put where their
    ids sit among the batch's distinct ids."""
    dim = values.shape[1]
    for k in range(positions.size):
        p = positions[k]
        for j in range(dim):
            out[p, j] = values[k, j]


@njit
def scatter_rows(inverse, grads, out):
    """out[r] = the sum of grads[i] over i with inverse[i] == r, added in the order of i (as
    torch's index_add_ on one thread adds, so the same float32 sums): the gradient of the
    distinct rows from that of the gathered ones."""
    dim = grads.shape[1]
    out[:] = 0
    for i in range(inverse.size):
        r = inverse[i]
        for j in range(dim):
            out[r, j] += grads[i, j]


@njit
def group_by_owner(ids, num_slots, owners):
    """(per owner index, how many of `ids` its slots hold; the positions of the ids grouped by
    owner, each group in increasing order): a counting sort by the owner of each id's slot
    (`owners`: the owner of every slot)."""
    n = ids.size
    num_owners = 0
    for s in range(owners.size):
        num_owners = max(num_owners, owners[s] + 1)
    counts = np.zeros(num_owners, np.int64)
    of = np.empty(n, np.int64)
    for i in range(n):
        o = owners[slot_of(ids[i], num_slots)]
        of[i] = o
        counts[o] += 1
    at = np.zeros(num_owners, np.int64)
    for o in range(1, num_owners):
        at[o] = at[o - 1] + counts[o - 1]
    order = np.empty(n, np.int64)
    for i in range(n):
        o = of[i]
        order[at[o]] = i
        at[o] += 1
    return counts, order
