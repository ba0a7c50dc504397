"""One embedding table's rows on this PS: bounded by admission, a cap and a TTL.

Rows live in place-indexed arrays: float32 weights (and Adagrad accumulators) [capacity, dim],
and per place the row's id (-1: a free place), its count (touches: one per request that pulls
or pushes it), last-touched step (the table's push count then), a touch tick (the order of
touches, for the cap's LRU/LFU choice) and last-touched time (for `ttl_s`). Ticks and times
are kept up to date only where something reads them (a cap; `ttl_s`): elsewhere a row keeps
those of its creation, which saves two writes per request. `ps.store.tables.index.RowIndex` maps ids to
places at a cost per request independent of the table's size; places freed by eviction are
reused by the next rows created.

What it promises (docs/ps.md, "Bounded embedding tables"):

- A row is created at the `admit_after`-th sighting of its id (a sighting: the id in a request
  that pulls rows); until then a pull answers the initial value and stores nothing but the
  sighting (in `AdmissionSketch`, fixed memory), and a push of the id is dropped. With
  `admit_after=1` a push of an absent id creates its row too (as before).
- With a cap (`row_cap`, this PS's share of `max_rows`) the rows held never exceed it: making
  room evicts the least recently (lru) or least often (lfu) touched rows that the request does
  not touch itself, at least 1/64 of the cap at a time (one O(rows) selection per batch, so the
  cost per created row stays flat). A request with more new ids than fit gets the initial
  value for the rest, which it does not store.
- Rows untouched for more than `ttl_steps` pushes or `ttl_s` seconds are evicted lazily: on
  the first request after the oldest row's deadline (pushes are exact; time sweeps run at most
  twice a second), and by `expire()` (status and metrics call it).
- An evicted row is gone: seen again, it is admitted again from its initial value.
- Everything changed (touched) since the last checkpoint file is tracked, and the ids of
  rows that file holds and that left since (evicted or moved away: at most the rows it holds,
  however many rows came and went in between), so a delta file holds only those rows and ids,
  and of the admission sketch the counters that changed (`delta`, `mark_clean`,
  `apply_delta`).
- Thread-safe: one lock per table, held for the whole of a pull (so a pull sees whole pushes)
  or a push. Snapshot views (`export(pin)`) read the live weights; a change to a pinned table
  copies them first (copy on write), as before.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable

import numpy as np
import torch

from pswire.tables import TableSpec

from ..embedding import initial_args
from ..limits import too_large
from ..optim import RowOptimizer
from . import bounds, files, kernels, one_pass, pulls
from .admission import AdmissionSketch
from .eviction import Cause, expired, next_expiry, victims
from .index import RowIndex, distinct_in_order, keys_of

EVICT_BATCH = 1 / 64     # at the cap, evict at least this share of it at once
TIME_SWEEP_S = 0.5       # time-based expiry runs at most this often
_META = ("counts", "steps", "ticks", "touched")


# A slot move's copy watches writes for well under a second; a watch no hand-over ended (its
# master died) stops after this many requests rather than grow.
WATCH_MAX = 1000


class Table:
    """One embedding table's rows on this PS (see the module docstring)."""

    def __init__(self, spec: TableSpec, optimizer: RowOptimizer, capacity: int = 1024,
                 row_cap: int = 0, clock: Callable[[], float] = time.time):
        spec.check()
        self.spec = spec
        self.optimizer = optimizer
        self.row_cap = row_cap
        self.clock = clock
        self.lock = threading.Lock()
        self.index = RowIndex(capacity)
        if row_cap:
            capacity = min(capacity, row_cap)
        self.high = 0  # places [0, high) were used; those with id -1 are free
        self.free = np.empty(0, dtype=np.int64)
        self.ids = np.full(capacity, -1, dtype=np.int64)
        self.counts = np.zeros(capacity, dtype=np.int64)
        self.steps = np.zeros(capacity, dtype=np.int64)
        self.ticks = np.zeros(capacity, dtype=np.int64)
        self.touched = np.zeros(capacity, dtype=np.float64)
        self.dirty = np.zeros(capacity, dtype=bool)
        self.filed = np.zeros(capacity, dtype=bool)  # the row is in the last checkpoint file
        self.weights = torch.empty(capacity, spec.dim)
        self.accum = (torch.empty(capacity, spec.dim) if optimizer.has_accumulator else None)
        self.views = one_pass.NumpyViews()  # numpy views of weights and accum
        self.sketch = AdmissionSketch() if spec.admit_after > 1 else None
        self.step = 0
        self.pushes = 0
        self.tick = 0
        self.admitted = 0
        self.filtered = 0
        self.evicted = {cause: 0 for cause in Cause}
        # ids of rows the last checkpoint file holds that left since (one entry per row: a
        # row leaves `filed` when it goes, so at most the rows that file holds)
        self.evicted_ids = files.EvictedIds()
        self.snaps: list = []  # SnapshotPins of open snapshot views reading the rows
        # while a slot move copies rows out (ps/slots/moves.py): the positions written and the ids
        # evicted since its copy, so the hand-over sends only those; None when none is
        # watching (the request path then pays one attribute test)
        self.watch: list | None = None
        self.watch_gone: list = []
        self.watch_attempt = 0
        self._next_step: int | None = None
        self._next_time: float | None = None
        self._last_sweep = -math.inf

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nbytes(self) -> int:
        """Memory held by the table's arrays (allocated capacity, index and sketch)."""
        n = self.weights.nbytes + (self.accum.nbytes if self.accum is not None else 0)
        n += sum(a.nbytes for a in (self.ids, self.counts, self.steps, self.ticks, self.touched,
                                    self.dirty, self.filed, self.free))
        n += self.index.nbytes + (self.sketch.nbytes if self.sketch is not None else 0)
        return n + self.evicted_ids.nbytes

    # -- reading and writing rows -------------------------------------------------------------

    def pull(self, ids, max_new: int | None = None) -> tuple[torch.Tensor, int]:
        """Rows of `ids` (a copy, [n, dim]) and how many rows this call created; more than
        `max_new` new rows are refused (TOO_LARGE) before anything changes. Ids not admitted
        (yet) answer their initial value. `ids`: int64, numpy or torch (`keys_of`)."""
        keys = keys_of(ids)
        with self.lock:
            return pulls.pull(self, keys, max_new)

    def pull_with_state(self, ids, marked: np.ndarray, max_new: int | None = None
                        ) -> tuple[torch.Tensor, int, torch.Tensor]:
        """`pull`, and the optimizer state (Adagrad's sum, [m, dim]) of the ids where the bool
        mask `marked` is set, read under the same lock (so as of the same pushes). A row not
        held (not admitted) answers the initial state."""
        keys = keys_of(ids)
        with self.lock:
            rows, created = pulls.pull(self, keys, max_new)
            index = self.index
            state = kernels.marked_state(
                index.entries, keys, marked, index._shift, index._mask,
                one_pass.arrays(self)[1], np.float32(self.optimizer.initial_accumulator_value))
            return rows, created, torch.from_numpy(state)

    def push(self, ids, grads, max_new: int | None = None) -> int:
        """Apply summed gradients of `ids` (int64, numpy or torch: `keys_of`; the gradients
        float32 [len(ids), dim], numpy or torch); returns the
        number of distinct rows updated. Rows of ids not admitted are dropped (admit_after >
        1) or created (admit_after 1; more than `max_new` to create are refused, TOO_LARGE,
        changing nothing)."""
        keys = keys_of(ids)
        sorted_distinct = bool(kernels.increasing(keys))
        if sorted_distinct:
            summed = grads  # sorted and distinct already (what the SDK sends)
        else:
            grads = torch.as_tensor(grads)
            unique, inverse = torch.unique(torch.from_numpy(keys), return_inverse=True)
            summed = torch.zeros(unique.numel(), self.spec.dim, dtype=grads.dtype)
            summed.index_add_(0, inverse, grads)
            keys = unique.numpy()
        with self.lock:
            now = self.clock()
            self._expire(now)
            if sorted_distinct and one_pass.push(self, keys, summed):  # the usual push
                self._expire(now)
                return int(keys.size)
            summed = torch.as_tensor(summed)  # numpy from the data plane: no copy
            places = self.index.lookup(keys)
            absent = places < 0
            if absent.any():
                if self.spec.admit_after == 1:
                    new = keys[absent]
                    self._refuse_too_many(new.size, max_new)
                    self._create(new, places, now)
                    places[absent] = self.index.lookup(new)
                    absent = places < 0  # past the cap within this one request
                keep = (~absent).nonzero()[0]
                if keep.size < places.size:
                    places, summed = places[keep], summed[torch.from_numpy(keep)]
                    keys = keys[keep]
            self._unshare()
            self.step += 1
            self.pushes += 1
            self.tick += 1
            self._touch(places, keys, now)
            if places.size:
                self.optimizer.apply(self.weights, self.accum, places, summed,
                                     self.step)
            self._expire(now)  # this push may have put rows past ttl_steps
            return int(places.size)

    def missing(self, ids) -> int:
        """How many rows a pull of `ids` would create now (at most)."""
        keys = keys_of(ids)
        with self.lock:
            absent = distinct_in_order(keys[self.index.lookup(keys) < 0])
            if self.sketch is None:
                return int(absent.size)
            estimate = self.sketch.estimate(absent)
            return int(np.count_nonzero(estimate + 1 >= self.spec.admit_after))

    def retune(self, spec: TableSpec, row_cap: int, settle: bool = True) -> None:
        """Adopt new bounds (ps.store.tables.bounds.retune)."""
        bounds.retune(self, spec, row_cap, settle)

    def reshare(self, row_cap: int) -> int:
        """Adopt this PS's new share of `max_rows`, evicting down to it (bounds.reshare)."""
        return bounds.reshare(self, row_cap)

    def expire(self) -> None:
        """Evict the rows whose TTL passed (the lazy expiry, run from outside a request)."""
        with self.lock:
            self._expire(self.clock())

    # -- under the lock -------------------------------------------------------------------------

    def _refuse_too_many(self, created: int, max_new: int | None) -> None:
        if max_new is not None and created > max_new:
            raise too_large(f"table {self.spec.name!r}: this request would create {created} "
                            f"rows; at most {max_new} new rows per request (--max-new-rows): "
                            "split the ids over several requests")

    def _admitted(self, missing: np.ndarray, max_new: int | None) -> np.ndarray:
        """Which of `missing` (distinct ids holding no row) this sighting admits; counts the
        sighting of the others."""
        if self.sketch is None:
            self._refuse_too_many(missing.size, max_new)
            return missing
        estimate = self.sketch.estimate(missing) + 1
        admit = estimate >= self.spec.admit_after
        self._refuse_too_many(int(np.count_nonzero(admit)), max_new)
        self.sketch.add(missing[~admit])
        self.filtered += int(missing.size - np.count_nonzero(admit))
        return missing[admit]

    def _create(self, new: np.ndarray, touched: np.ndarray, now: float) -> int:
        """Create rows of `new` (distinct, absent) at their initial value, evicting at the cap
        rows other than those this request touches (`touched`: the request's places, -1 where
        absent). Returns how many were made."""
        if not new.size:
            return 0
        if self.row_cap:
            over = len(self) + new.size - self.row_cap
            if over > 0:
                self._make_room(over, touched[touched >= 0])
                new = new[: max(0, self.row_cap - len(self))]
                if not new.size:
                    return 0
        n = new.size
        reused = self.free[-n:][::-1] if self.free.size else self.free
        fresh = n - reused.size
        self.free = self.free[: self.free.size - reused.size]
        places = np.concatenate([reused, np.arange(self.high, self.high + fresh, dtype=np.int64)])
        self._reserve(self.high + fresh)
        if reused.size:
            self._unshare()  # a view may read those places: they held evicted rows
        self.high += fresh
        weights, accum = one_pass.arrays(self)
        init, base, a, b = initial_args(self.spec)
        kernels.create_rows(places, np.ascontiguousarray(new, np.int64), weights,
                            weights if accum is None else accum, accum is not None,
                            np.float32(self.optimizer.initial_accumulator_value), init, base,
                            a, b, self.ids, self.counts, self.steps, self.pushes, self.ticks,
                            self.tick, self.touched, float(now), self.dirty)
        if self.watch is not None:
            self._watched(places)
        self.index.insert(new, places)
        self.admitted += n
        self._note_deadline(places)
        return n

    def _make_room(self, over: int, protect: np.ndarray) -> None:
        live = self._live()
        if protect.size:
            live = live[~np.isin(live, protect)]
        count = max(over, math.ceil(self.row_cap * EVICT_BATCH))
        self._evict(victims(live, count, self.spec.evict, self.counts, self.ticks, self.ids),
                    Cause.CAP)

    def _evict(self, places: np.ndarray, cause: Cause) -> None:
        if not places.size:
            return
        gone = self.ids[places].copy()
        if self.watch is not None:
            self.watch_gone.append(gone)
        self.index.delete(gone)
        self.free = np.concatenate([self.free, places])
        self.evicted[cause] += int(places.size)
        files.left(self, places, gone)

    def _touch(self, places: np.ndarray, keys: np.ndarray, now: float) -> None:
        """Rows `places` (of ids `keys`) were touched by one request: one count each (an id
        repeated within the request counts once), the step, the dirty mark."""
        if not kernels.touch(places, keys, self.counts, self.steps, self.pushes, self.dirty):
            self.counts[places] += 1  # fancy-index +=: a repeated place is counted once
        # the touch order and time are read by the cap's choice and by ttl_s only: a table
        # without them keeps each row's from its creation (two writes less per request)
        if self.row_cap:
            self.ticks[places] = self.tick
        if self.spec.ttl_s:
            self.touched[places] = now
        if self.watch is not None:
            self._watched(places)

    def _watched(self, places: np.ndarray) -> None:
        self.watch.append(places.copy())
        if len(self.watch) > WATCH_MAX:  # a move left behind: its hand-over copies all
            self.unwatch()

    def unwatch(self) -> None:
        """Under self.lock: stop recording changes for a slot move (ps/slots/moves.py)."""
        self.watch, self.watch_gone, self.watch_attempt = None, [], 0

    def _live(self) -> np.ndarray:
        return np.flatnonzero(self.ids[: self.high] >= 0)

    def _note_deadline(self, places: np.ndarray) -> None:
        """New rows can expire no earlier than rows already held: only a first row sets the
        deadlines (touches only move deadlines later)."""
        spec = self.spec
        if not (spec.ttl_steps or spec.ttl_s) or not places.size:
            return
        step, at = next_expiry(places, self.steps, self.touched, ttl_steps=spec.ttl_steps,
                               ttl_s=spec.ttl_s)
        if step is not None and (self._next_step is None or step < self._next_step):
            self._next_step = step
        if at is not None and (self._next_time is None or at < self._next_time):
            self._next_time = at

    def _expire(self, now: float) -> None:
        spec = self.spec
        if not (spec.ttl_steps or spec.ttl_s):
            return
        due = self._next_step is not None and self.pushes >= self._next_step
        if (not due and self._next_time is not None and now >= self._next_time
                and now - self._last_sweep >= TIME_SWEEP_S):
            due = True
        if not due:
            return
        self._last_sweep = now
        live = self._live()
        gone = expired(live, self.steps, self.touched, pushes=self.pushes, now=now,
                       ttl_steps=spec.ttl_steps, ttl_s=spec.ttl_s)
        self._evict(gone, Cause.TTL)
        rest = live[~np.isin(live, gone)] if gone.size else live
        self._next_step, self._next_time = next_expiry(
            rest, self.steps, self.touched, ttl_steps=spec.ttl_steps, ttl_s=spec.ttl_s)

    def _unshare(self) -> None:
        """Before changing weights in place: copy them when an open snapshot view reads them."""
        if self.snaps:
            if any(not pin.done for pin in self.snaps):
                self.views.drop()
                self.weights = self.weights.clone()
                if self.accum is not None:
                    self.accum = self.accum.clone()
            self.snaps = []

    def _reserve(self, needed: int) -> None:
        capacity = self.weights.shape[0]
        if needed <= capacity:
            return
        capacity = max(needed, capacity * 2)
        if self.row_cap:
            capacity = max(needed, min(capacity, self.row_cap))
        self.ids = _grown_np(self.ids, capacity, -1)
        for name in _META + ("dirty", "filed"):
            setattr(self, name, _grown_np(getattr(self, name), capacity, 0))
        self.views.drop()
        self.weights = _grown(self.weights, capacity)
        if self.accum is not None:
            self.accum = _grown(self.accum, capacity)

    # -- checkpoints ----------------------------------------------------------------------------

    def export(self, pin=None) -> dict:
        """The rows, with their metadata and the counters (see files.export)."""
        return files.export(self, pin)

    def delta(self) -> dict:
        """The rows touched and the filed ids gone since the last `mark_clean`
        (files.delta)."""
        return files.delta(self)

    def mark_clean(self) -> None:
        """Everything up to now is in a checkpoint file."""
        with self.lock:
            files.mark_filed(self)

    def restore(self, state: dict) -> None:
        """Adopt a full export (files.restore)."""
        files.restore(self, state)

    def apply_delta(self, state: dict) -> None:
        """Apply a delta on top of this table (files.apply_delta)."""
        files.apply_delta(self, state)

    def _reset_deadlines(self) -> None:
        spec = self.spec
        self._next_step, self._next_time = next_expiry(
            self._live(), self.steps, self.touched, ttl_steps=spec.ttl_steps, ttl_s=spec.ttl_s)
        self._last_sweep = -math.inf

    def rows(self) -> dict[int, tuple]:
        """{id: (weights, accum or None, count, step)} (files.contents; for tests)."""
        return files.contents(self)


def _grown(t: torch.Tensor, capacity: int) -> torch.Tensor:
    out = torch.empty(capacity, t.shape[1], dtype=t.dtype)
    out[: t.shape[0]] = t
    return out


def _grown_np(a: np.ndarray, capacity: int, fill) -> np.ndarray:
    out = np.full(capacity, fill, dtype=a.dtype)
    out[: a.size] = a
    return out
