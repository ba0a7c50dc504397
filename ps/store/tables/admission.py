"""Admission: count sightings of ids that hold no row yet, in a fixed amount of memory.

A count-min sketch (depth hash rows of `width` uint16 counters, conservative update): an id's
estimate is the least of its counters, never below its true count since the last halving, so
an id seen K times is always admitted at its K-th sighting; a collision can only admit an id
early. Memory is `depth * width * 2` bytes whatever the number of distinct ids. After every
`8 * width` sightings all counters are halved (TinyLFU's reset), so a long stream of one-off
ids cannot saturate the sketch and admit everything.

Checkpoints: `export` is the whole sketch; `changes` only the counters that differ from those
of the last file (`mark_filed` keeps a copy of them), so a delta file carries a few cells
instead of the whole sketch (`restore` takes either).
"""
from __future__ import annotations

import numpy as np
import torch

DEPTH = 4
DEFAULT_WIDTH = 1 << 18  # 4 rows x 256 Ki x 2 bytes = 2 MiB per table with admit_after > 1
_SALTS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                   0xD6E8FEB86659FD93], dtype=np.uint64)
_MAX = np.iinfo(np.uint16).max


class AdmissionSketch:
    """Sightings per id (approximate from above), for `admit_after` thresholds up to 65535."""

    def __init__(self, width: int = DEFAULT_WIDTH) -> None:
        if width & (width - 1) or width < 2:
            raise ValueError(f"the sketch width must be a power of two, got {width}")
        self.width = width
        self.counters = np.zeros((DEPTH, width), dtype=np.uint16)
        self.sightings = 0
        self.halvings = 0
        self._bits = width.bit_length() - 1
        self._filed: np.ndarray | None = None  # the counters the last file holds (None: none)

    @property
    def nbytes(self) -> int:
        return self.counters.nbytes + (self._filed.nbytes if self._filed is not None else 0)

    def _cells(self, ids: np.ndarray) -> np.ndarray:
        """[DEPTH, n] column of each id in each row."""
        with np.errstate(over="ignore"):
            h = ids.astype(np.uint64)[None, :] * _SALTS[:, None]
            h ^= h >> np.uint64(29)
            h *= np.uint64(0xBF58476D1CE4E5B9)
        return (h >> np.uint64(64 - self._bits)).astype(np.int64)

    def estimate(self, ids: np.ndarray) -> np.ndarray:
        if not ids.size:
            return np.zeros(0, dtype=np.int64)
        cells = self._cells(ids)
        return self.counters[np.arange(DEPTH)[:, None], cells].min(axis=0).astype(np.int64)

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Count one sighting of each of `ids` (distinct); returns their new estimates."""
        if not ids.size:
            return np.zeros(0, dtype=np.int64)
        rows = np.arange(DEPTH)[:, None]
        cells = self._cells(ids)
        current = self.counters[rows, cells]
        new = current.min(axis=0).astype(np.int64) + 1
        # conservative update: raise only the counters below the new estimate. Two ids of the
        # batch sharing a counter both write it; the larger value wins (np.maximum.at)
        target = np.minimum(new, _MAX).astype(np.uint16)
        np.maximum.at(self.counters, (np.broadcast_to(rows, cells.shape), cells),
                      np.broadcast_to(target, cells.shape))
        self.sightings += ids.size
        if self.sightings >= 8 * self.width:
            self.counters >>= 1
            self.sightings = 0
            self.halvings += 1
        return new

    def export(self) -> dict:
        """A copy of the counters (as int16 bits: checkpoints store torch dtypes)."""
        return {"counters": torch.from_numpy(self.counters.view(np.int16).copy()),
                "sightings": self.sightings, "halvings": self.halvings}

    def changes(self) -> dict:
        """The counters changed since `mark_filed` (their flat positions and values), or the
        whole sketch (`export`) when there is no filed copy or listing them would be larger.
        A position and its value take 6 bytes, a counter of the whole sketch 2."""
        if self._filed is None:
            return self.export()
        flat = self.counters.reshape(-1)
        at = np.flatnonzero(flat != self._filed.reshape(-1))
        if at.size * 6 >= flat.nbytes:
            return self.export()
        return {"changed_at": torch.from_numpy(at.astype(np.int32)),
                "values": torch.from_numpy(flat[at].view(np.int16)),
                "sightings": self.sightings, "halvings": self.halvings}

    def mark_filed(self) -> None:
        """The counters as they are now are in a checkpoint file: `changes` is relative to
        them from now on."""
        if self._filed is None:
            self._filed = self.counters.copy()
        else:
            np.copyto(self._filed, self.counters)

    def restore(self, state: dict) -> None:
        """Adopt an `export` (the whole sketch) or apply `changes` on top of this one."""
        if "changed_at" in state:
            at = _numpy(state["changed_at"]).astype(np.int64)
            values = _numpy(state["values"]).view(np.uint16)
            if at.size and (at.min() < 0 or at.max() >= self.counters.size
                            or at.size != values.size):
                raise ValueError("the sketch changes do not fit this sketch")
            self.counters.reshape(-1)[at] = values
        else:
            counters = _numpy(state["counters"]).view(np.uint16)
            if counters.shape != self.counters.shape:
                return
            self.counters = counters.copy()
        self.sightings = int(state.get("sightings", 0))
        self.halvings = int(state.get("halvings", 0))


def _numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
