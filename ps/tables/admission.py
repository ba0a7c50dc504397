"""Admission: count sightings of ids that hold no row yet, in a fixed amount of memory.

A count-min sketch (depth hash rows of `width` uint16 counters, conservative update): an id's
estimate is the least of its counters, never below its true count since the last halving, so
an id seen K times is always admitted at its K-th sighting; a collision can only admit an id
early. Memory is `depth * width * 2` bytes whatever the number of distinct ids. After every
`8 * width` sightings all counters are halved (TinyLFU's reset), so a long stream of one-off
ids cannot saturate the sketch and admit everything.
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

    @property
    def nbytes(self) -> int:
        return self.counters.nbytes

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

    def restore(self, state: dict) -> None:
        counters = state["counters"]
        counters = (counters.numpy() if isinstance(counters, torch.Tensor)
                    else np.asarray(counters)).view(np.uint16)
        if counters.shape == self.counters.shape:
            self.counters = counters.copy()
            self.sightings = int(state.get("sightings", 0))
            self.halvings = int(state.get("halvings", 0))
