"""Compiled loops of a table's request path: row-index probes and row optimizer updates.

Each replaces 10-20 numpy/torch calls on a request's few thousand ids with one call
(pswire/jit.py says why). The index's layout and probing rules are `ps.store.tables.index`'s; the
updates are `ps.store.optim.RowOptimizer`'s arithmetic in float32, rounding where torch rounds:
the accumulator's `state + grad**2` in two steps, the weight's `w + (-lr) * u` fused, as
torch's `add_(u, alpha=-lr)` computes it (a fused multiply-add).
"""
from __future__ import annotations

import numpy as np

from pswire.jit import njit, splitmix
from pswire.slots import GOLDEN

_FIB = GOLDEN  # ps.store.tables.index._MULT: Fibonacci hashing's multiplier is the same number

EMPTY = -1


@njit
def _probe(entries, key, shift, mask):
    """The place of one id (-1 where absent): linear probing from the id's home until its key
    or an empty position (tombstones are passed over)."""
    pos = np.int64((np.uint64(key) * _FIB) >> shift)
    while True:
        found = entries[pos, 0]
        if found == key:
            return entries[pos, 1]
        if found == EMPTY:
            return -1
        pos = (pos + 1) & mask


@njit
def lookup(entries, ids, shift, mask):
    """The place of each id (-1 where absent)."""
    out = np.empty(ids.size, np.int64)
    for i in range(ids.size):
        out[i] = _probe(entries, ids[i], shift, mask)
    return out


@njit
def insert(entries, ids, places, shift, mask):
    """Put absent, distinct ids with their places at the first free position (empty or a
    tombstone) from their home; returns how many tombstones were reused."""
    reused = 0
    for i in range(ids.size):
        pos = np.int64((np.uint64(ids[i]) * _FIB) >> shift)
        while entries[pos, 0] >= 0:
            pos = (pos + 1) & mask
        if entries[pos, 0] != EMPTY:
            reused += 1
        entries[pos, 0] = ids[i]
        entries[pos, 1] = places[i]
    return reused


@njit(fastmath={"contract"})
def _fma(a, b, c):
    return a * b + c  # contracted: one rounding, as torch's vectorized add_ with alpha


@njit(error_model="numpy")
def adagrad(weights, accum, places, grads, clr, eps):
    """Row Adagrad on rows `places` (distinct) of float32 `weights`/`accum` [rows, dim]:
    state += g*g; w += -clr * g / (sqrt(state) + eps). The numpy error model: a division by
    zero (eps 0 and a zero sum) gives torch's inf or NaN instead of raising, and with no check
    per element the loop over a row vectorizes (the same IEEE operations, 4x faster: 47
    against 11 us for 1,700 rows of 16)."""
    dim = weights.shape[1]
    neg = np.float32(-clr)
    e = np.float32(eps)
    for i in range(places.size):
        s = places[i]
        for j in range(dim):
            g = grads[i, j]
            state = accum[s, j] + g * g
            accum[s, j] = state
            weights[s, j] = _fma(g / (np.sqrt(state) + e), neg, weights[s, j])


@njit
def _unit(bits):
    """ps.store.embedding._unit: a uniform float64 in (0, 1] from 53 of 64 bits."""
    return (np.float64(bits >> np.uint64(11)) + 1.0) * (1.0 / 2.0**53)


@njit
def initial_rows(ids, base, dim, normal, a, b):
    """ps.store.embedding.initial_rows' values [len(ids), dim] in float32: splitmix64 of the id
    mixed with the table's key, counters along the row; normal: Box-Muller (a + b * z, a
    pair of counters per two columns), else uniform in [a, b). The same integer steps; the
    float64 logarithm, cosine and sine are libm's where numpy's may be its own, so a value
    may differ in its last float64 bit, which float32 almost never keeps."""
    out = np.empty((ids.size, dim), np.float32)
    for i in range(ids.size):
        _fill_row(out, i, ids[i], base, normal, a, b)
    return out


@njit
def _fill_row(out, at, key, base, normal, a, b):
    """Row `at` of `out` [rows, dim] := the initial values of id `key` (`initial_rows`)."""
    dim = out.shape[1]
    row = splitmix(np.uint64(key) ^ base)
    if normal:
        for k in range((dim + 1) // 2):
            u1 = _unit(splitmix(row + np.uint64(2 * k) * GOLDEN))
            u2 = _unit(splitmix(row + np.uint64(2 * k + 1) * GOLDEN))
            radius = np.sqrt(-2.0 * np.log(u1))
            angle = (2.0 * np.pi) * u2
            out[at, 2 * k] = a + b * (radius * np.cos(angle))
            if 2 * k + 1 < dim:
                out[at, 2 * k + 1] = a + b * (radius * np.sin(angle))
    else:
        for k in range(dim):
            u = _unit(splitmix(row + np.uint64(k) * GOLDEN))
            out[at, k] = a + (b - a) * (u - 2.0**-53)


@njit
def create_rows(places, new, weights, accum, has_accum, accum_value, init, base, a, b, ids,
                counts, steps, pushes, ticks, tick, touched, now, dirty):
    """Rows of ids `new` (distinct, absent) at `places`: their initial weights (`init`: 0
    zeros, 1 normal, 2 uniform: `initial_rows`' values, written in place), the
    accumulator's initial value, and the metadata of a new row (id, count 0, the table's
    push count, tick and time, dirty)."""
    dim = weights.shape[1]
    for i in range(places.size):
        p = places[i]
        if init == 0:
            for k in range(dim):
                weights[p, k] = 0.0
        else:
            _fill_row(weights, p, new[i], base, init == 1, a, b)
        if has_accum:
            for k in range(dim):
                accum[p, k] = accum_value
        ids[p] = new[i]
        counts[p] = 0
        steps[p] = pushes
        ticks[p] = tick
        touched[p] = now
        dirty[p] = True


@njit
def sgd(weights, places, grads, lr):
    """Row SGD on rows `places` (distinct): w += -lr * g."""
    dim = weights.shape[1]
    neg = np.float32(-lr)
    for i in range(places.size):
        s = places[i]
        for j in range(dim):
            weights[s, j] = _fma(grads[i, j], neg, weights[s, j])


@njit
def touch(places, keys, counts, steps, step, dirty):
    """One request's touch of rows `places` (of ids `keys`): last-touched step and dirty mark,
    and one count each. Counts only when the ids are strictly increasing (distinct: what the
    SDK sends), returning whether it did; else the caller counts each row once."""
    for i in range(places.size):
        s = places[i]
        steps[s] = step
        dirty[s] = True
    for i in range(1, keys.size):
        if keys[i] <= keys[i - 1]:
            return False
    for i in range(places.size):
        counts[places[i]] += 1
    return True


@njit
def increasing(keys):
    """Whether `keys` are strictly increasing (sorted and distinct: what the SDK sends)."""
    for i in range(1, keys.size):
        if keys[i] <= keys[i - 1]:
            return False
    return True


@njit
def _find_all(entries, keys, shift, mask):
    """`lookup` of every key, or None as soon as one is absent."""
    places = np.empty(keys.size, np.int64)
    for i in range(keys.size):
        place = _probe(entries, keys[i], shift, mask)
        if place < 0:
            return None
        places[i] = place
    return places


@njit
def push_held(entries, keys, shift, mask, counts, steps, step, dirty, weights, accum, grads,
              lr, eps, is_sgd):
    """A push whose ids (strictly increasing) all hold rows, in one pass: `lookup`, `touch`
    (count, step, dirty) and the row update (`sgd`, or `adagrad` with `lr` as clr). Returns
    how many rows it updated, or -1, having changed nothing, when an id holds no row (the
    caller then takes the general path)."""
    places = _find_all(entries, keys, shift, mask)
    if places is None:
        return -1
    touch(places, keys, counts, steps, step, dirty)
    if is_sgd:
        sgd(weights, places, grads, lr)
    else:
        adagrad(weights, accum, places, grads, lr, eps)
    return places.size


@njit
def pull_held(entries, keys, shift, mask, counts, steps, step, dirty, weights):
    """A pull whose ids (strictly increasing) all hold rows, in one pass: `lookup`, `touch`
    and a copy of the rows [n, dim]; None, having changed nothing, when an id holds no row
    or the ids are not strictly increasing (`touch` would not count them)."""
    for i in range(1, keys.size):
        if keys[i] <= keys[i - 1]:
            return None
    places = _find_all(entries, keys, shift, mask)
    if places is None:
        return None
    touch(places, keys, counts, steps, step, dirty)
    dim = weights.shape[1]
    out = np.empty((places.size, dim), weights.dtype)
    for i in range(places.size):
        s = places[i]
        for j in range(dim):
            out[i, j] = weights[s, j]
    return out


@njit
def marked_state(entries, keys, marked, shift, mask, accum, initial):
    """The accumulator rows [marked ids, dim] of the `keys` where the bool mask `marked` is
    set, in their order; a key that holds no row gets `initial` (its state when created)."""
    count = 0
    for i in range(marked.size):
        count += marked[i]
    dim = accum.shape[1]
    out = np.empty((count, dim), accum.dtype)
    k = 0
    for i in range(keys.size):
        if not marked[i]:
            continue
        place = _probe(entries, keys[i], shift, mask)
        if place < 0:
            for j in range(dim):
                out[k, j] = initial
        else:
            for j in range(dim):
                out[k, j] = accum[place, j]
        k += 1
    return out


def warm_up() -> None:
    """Load (or, the first time after a change, compile) every loop of a request's path, so
    that the first requests do not pay for it."""
    from pswire import jit

    jit.warm_up()
    entries = np.full((16, 2), EMPTY, dtype=np.int64)
    ids = np.arange(2, dtype=np.int64)
    shift, mask = np.uint64(60), 15
    insert(entries, ids, ids, shift, mask)
    lookup(entries, ids, shift, mask)
    w = np.zeros((2, 2), dtype=np.float32)
    adagrad(w, w.copy(), ids, w.copy(), 0.1, 1e-10)
    sgd(w, ids, w.copy(), 0.1)
    initial_rows(ids, np.uint64(1), 3, True, 0.0, 0.01)
    initial_rows(ids, np.uint64(1), 3, False, 0.0, 0.01)
    create_rows(ids, ids, w, w.copy(), True, np.float32(0.1), 1, np.uint64(1), 0.0, 0.01,
                ids.copy(), ids.copy(), ids.copy(), 1, ids.copy(), 1, np.zeros(2), 0.5,
                np.zeros(2, dtype=bool))
    touch(ids, ids, ids.copy(), ids.copy(), 1, np.zeros(2, dtype=bool))
    for is_sgd in (False, True):
        push_held(entries, ids, shift, mask, ids.copy(), ids.copy(), 1, np.zeros(2, dtype=bool),
                  w, w.copy(), w.copy(), 0.1, 1e-10, is_sgd)
    pull_held(entries, ids, shift, mask, ids.copy(), ids.copy(), 1, np.zeros(2, dtype=bool), w)
    marked_state(entries, ids, np.ones(2, dtype=bool), shift, mask, w, np.float32(0))
    increasing(ids)
