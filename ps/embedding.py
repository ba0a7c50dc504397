"""A sparse embedding table: rows created lazily and deterministically, updated row-wise.

A row's initial value is a pure function of (seed, table name, id, column), computed with a
counter-based generator (splitmix64), so every PS and every restart create the same row
whatever order ids arrive in, and a table can be split over PS by id with no coordination.
Rows live in one growing [capacity, dim] float32 tensor; a dict maps id -> slot.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np
import torch

from pswire.tables import TableSpec
from .limits import too_large
from .optim import RowOptimizer

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _unit(bits: np.ndarray) -> np.ndarray:
    """Uniform float64 in (0, 1] from 64 random bits (53 of them)."""
    return ((bits >> np.uint64(11)).astype(np.float64) + 1.0) * (1.0 / 2**53)


def initial_rows(spec: TableSpec, ids: np.ndarray) -> torch.Tensor:
    """The initial float32 rows [len(ids), dim] of `ids` (int64, all >= 0)."""
    n = len(ids)
    if spec.initializer == "zeros" or n == 0:
        return torch.zeros(n, spec.dim)
    key = hashlib.blake2b(f"{spec.seed}\0{spec.name}".encode(), digest_size=8).digest()
    base = np.uint64(int.from_bytes(key, "little"))
    rows = _splitmix64(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ base)[:, None]
    if spec.initializer == "uniform":
        cols = np.arange(spec.dim, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):
            u = _unit(_splitmix64(rows + cols * _GOLDEN))
        values = spec.init_a + (spec.init_b - spec.init_a) * (u - 2.0**-53)
    else:  # normal: Box-Muller, one pair of counters gives two columns (cos and sin)
        pairs = np.arange((spec.dim + 1) // 2, dtype=np.uint64)[None, :] * np.uint64(2)
        with np.errstate(over="ignore"):
            u1 = _unit(_splitmix64(rows + pairs * _GOLDEN))
            u2 = _unit(_splitmix64(rows + (pairs + np.uint64(1)) * _GOLDEN))
        radius = np.sqrt(-2.0 * np.log(u1))
        angle = (2.0 * np.pi) * u2
        z = np.empty((n, pairs.shape[1] * 2))
        z[:, 0::2] = radius * np.cos(angle)
        z[:, 1::2] = radius * np.sin(angle)
        values = spec.init_a + spec.init_b * z[:, : spec.dim]
    return torch.from_numpy(values.astype(np.float32))


class Table:
    """One embedding table's rows on this PS. Thread-safe: one lock per table, held for the
    whole of a pull (so a pull sees whole pushes) or a push."""

    def __init__(self, spec: TableSpec, optimizer: RowOptimizer, capacity: int = 1024):
        spec.check()
        self.spec = spec
        self.optimizer = optimizer
        self.lock = threading.Lock()
        self.index = SortedIndex()
        self.ids = np.empty(capacity, dtype=np.int64)  # id of each slot, in slot order
        self.weights = torch.empty(capacity, spec.dim)
        self.accum = (torch.empty(capacity, spec.dim) if optimizer.has_accumulator else None)
        self.step = 0
        self.pushes = 0
        self.snaps: list = []  # SnapshotPins of open snapshot views reading the rows

    def __len__(self) -> int:
        return len(self.index)

    # -- reading and writing rows -------------------------------------------------------------

    def pull(self, ids: torch.Tensor, max_new: int | None = None) -> tuple[torch.Tensor, int]:
        """Rows of `ids` (a copy, [n, dim]) and how many rows this call created; more than
        `max_new` new rows are refused (TOO_LARGE) before any is made."""
        with self.lock:
            slots, created = self._slots(ids, max_new)
            return self.weights.index_select(0, slots), created

    def push(self, ids: torch.Tensor, grads: torch.Tensor, max_new: int | None = None) -> int:
        """Apply summed gradients of `ids`; returns the number of distinct rows updated.
        More than `max_new` rows to create are refused (TOO_LARGE), changing nothing."""
        keys = ids.numpy()
        if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):
            unique, summed = ids, grads  # sorted and distinct already (what the SDK sends)
        else:
            unique, inverse = torch.unique(ids, return_inverse=True)
            summed = torch.zeros(unique.numel(), self.spec.dim, dtype=grads.dtype)
            summed.index_add_(0, inverse, grads)
        with self.lock:
            slots, _ = self._slots(unique, max_new)
            if self.snaps:
                if any(not pin.done for pin in self.snaps):  # views read them: change a copy
                    self.weights = self.weights.clone()
                    if self.accum is not None:
                        self.accum = self.accum.clone()
                self.snaps = []
            self.step += 1
            self.pushes += 1
            self.optimizer.apply(self.weights, self.accum, slots, summed, self.step)
        return unique.numel()

    def missing(self, ids: torch.Tensor) -> int:
        """How many rows a pull or push of `ids` would create now."""
        keys = ids.numpy()
        with self.lock:
            absent = keys[self.index.lookup(keys) < 0]
        return int(_distinct_in_order(absent).size)

    def _slots(self, ids: torch.Tensor, max_new: int | None = None) -> tuple[torch.Tensor, int]:
        """Slots of `ids`, creating the missing rows (in first-seen order)."""
        keys = ids.numpy()
        slots = self.index.lookup(keys)
        missing_at = np.flatnonzero(slots < 0)
        if not missing_at.size:
            return torch.from_numpy(slots), 0
        missing = _distinct_in_order(keys[missing_at])
        created = missing.size
        if max_new is not None and created > max_new:
            raise too_large(f"table {self.spec.name!r}: this request would create {created} "
                            f"rows; at most {max_new} new rows per request (--max-new-rows): "
                            "split the ids over several requests")
        start = len(self.index)
        self._reserve(start + created)
        self.weights[start:start + created] = initial_rows(self.spec, missing)
        if self.accum is not None:
            self.accum[start:start + created] = self.optimizer.initial_accumulator_value
        self.ids[start:start + created] = missing
        self.index.insert(missing, np.arange(start, start + created, dtype=np.int64))
        return torch.from_numpy(self.index.lookup(keys)), created

    def _reserve(self, needed: int) -> None:
        capacity = self.weights.shape[0]
        if needed <= capacity:
            return
        capacity = max(needed, capacity * 2)
        ids = np.empty(capacity, dtype=np.int64)
        ids[: len(self.index)] = self.ids[: len(self.index)]
        self.ids = ids
        self.weights = _grown(self.weights, capacity)
        if self.accum is not None:
            self.accum = _grown(self.accum, capacity)

    # -- checkpoints ----------------------------------------------------------------------------

    def export(self, pin=None) -> dict:
        """The rows (call under the store's exclusive gate). With `pin` (a SnapshotPin) the
        rows are views of the live ones, valid until the pin is released (a push copies them
        first); without, a copy. Ids are copied either way (8 bytes a row). Rows created later
        go past the views' end, so they never reach them."""
        with self.lock:
            n = len(self.index)
            weights, accum = self.weights[:n], None if self.accum is None else self.accum[:n]
            if pin is None:
                weights, accum = weights.clone(), None if accum is None else accum.clone()
            else:
                self.snaps = [p for p in self.snaps if not p.done] + [pin]
            return {"ids": torch.from_numpy(self.ids[:n].copy()), "weights": weights,
                    "accum": accum, "step": self.step, "pushes": self.pushes}

    def restore(self, state: dict) -> None:
        ids = state["ids"]
        n = ids.numel()
        if state["weights"].shape != (n, self.spec.dim):
            raise ValueError(f"table {self.spec.name!r}: checkpoint rows have shape "
                             f"{tuple(state['weights'].shape)}, expected ({n}, {self.spec.dim})")
        # adopt the loaded tensors (restore reads a checkpoint once, into these): growing
        # past n later copies them into a larger buffer, as any growth does
        self.weights = state["weights"].contiguous()
        if self.accum is not None:
            accum = state.get("accum")
            self.accum = (accum.contiguous() if accum is not None else
                          torch.full((n, self.spec.dim), self.optimizer.initial_accumulator_value))
        self.ids = ids.numpy().astype(np.int64, copy=True)
        self.index = SortedIndex()
        self.index.insert(ids.numpy().astype(np.int64), np.arange(n, dtype=np.int64))
        self.step = int(state.get("step", 0))
        self.pushes = int(state.get("pushes", 0))


class SortedIndex:
    """id -> slot, as two sorted numpy arrays: vectorized lookups (binary search) and batched
    inserts (one merge per batch), with no per-id Python work."""

    def __init__(self) -> None:
        self.keys = np.empty(0, dtype=np.int64)
        self.slots = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return self.keys.size

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The slot of each id, -1 where absent."""
        if not self.keys.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.searchsorted(self.keys, ids)
        np.minimum(pos, self.keys.size - 1, out=pos)
        return np.where(self.keys[pos] == ids, self.slots[pos], -1)

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add absent, distinct ids."""
        order = np.argsort(ids, kind="stable")
        ids, slots = ids[order], slots[order]
        pos = np.searchsorted(self.keys, ids)
        self.keys = np.insert(self.keys, pos, ids)
        self.slots = np.insert(self.slots, pos, slots)


def _distinct_in_order(keys: np.ndarray) -> np.ndarray:
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


def _grown(t: torch.Tensor, capacity: int) -> torch.Tensor:
    out = torch.empty(capacity, t.shape[1], dtype=t.dtype)
    out[: t.shape[0]] = t
    return out

