"""A sparse embedding table: rows created lazily and deterministically, updated row-wise.

A row's initial value is a pure function of (seed, table name, id, column), computed with a
counter-based generator (splitmix64), so every PS and every restart create the same row
whatever order ids arrive in, and a table can be split over PS by id with no coordination.
The table that holds the rows (admission, a cap, TTL, deltas) is ps.tables.table.Table.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch

from rpckit.errors import invalid

INITIALIZERS = ("normal", "uniform", "zeros")
MAX_DIM = 65_536
MAX_ADMIT_AFTER = 65_535  # the admission sketch counts in uint16
EVICTION_POLICIES = ("lru", "lfu")
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


@dataclass(frozen=True)
class TableSpec:
    name: str
    dim: int
    initializer: str = "normal"
    init_a: float = 0.0
    init_b: float = 0.01
    seed: int = 0
    num_embeddings: int = 0  # ids must be below it; 0: unbounded
    # bounded tables (DESIGN.md "Bounded embedding tables"; ps.tables)
    max_rows: int = 0        # rows held over all PS; 0: unbounded
    admit_after: int = 1     # a row is created at this sighting of its id
    ttl_s: float = 0.0       # rows untouched this many seconds are evicted; 0: never
    ttl_steps: int = 0       # ... or this many of the table's pushes; 0: never
    evict: str = "lru"       # which rows make room at max_rows: "lru" or "lfu"

    def check(self) -> None:
        if not self.name:
            raise invalid("a table needs a name")
        check_bounds(self)
        if self.num_embeddings < 0:
            raise invalid(f"table {self.name!r}: num_embeddings must be >= 0 (0: unbounded), "
                          f"got {self.num_embeddings}")
        if not 0 < self.dim <= MAX_DIM:
            raise invalid(f"table {self.name!r}: dim must be in 1..{MAX_DIM}, got {self.dim}")
        if self.initializer not in INITIALIZERS:
            raise invalid(f"table {self.name!r}: initializer {self.initializer!r} is not one of "
                          f"{', '.join(INITIALIZERS)}")
        if not (math.isfinite(self.init_a) and math.isfinite(self.init_b)):
            raise invalid(f"table {self.name!r}: init_a and init_b must be finite")
        if self.initializer == "normal" and self.init_b < 0:
            raise invalid(f"table {self.name!r}: normal std (init_b) must be >= 0")
        if self.initializer == "uniform" and self.init_b < self.init_a:
            raise invalid(f"table {self.name!r}: uniform needs init_a <= init_b")


def check_bounds(spec: TableSpec) -> None:
    """INVALID_ARGUMENT naming the field for a bad max_rows, admit_after, ttl or evict."""
    name = spec.name
    for field in ("max_rows", "admit_after", "ttl_steps"):
        value = getattr(spec, field)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise invalid(f"table {name!r}: {field} must be an integer, got {value!r}")
    if spec.max_rows < 0:
        raise invalid(f"table {name!r}: max_rows must be >= 0 (0: unbounded), got "
                      f"{spec.max_rows}")
    if not 1 <= spec.admit_after <= MAX_ADMIT_AFTER:
        raise invalid(f"table {name!r}: admit_after must be in 1..{MAX_ADMIT_AFTER} (1: a row "
                      f"at the first sighting), got {spec.admit_after}")
    if spec.ttl_steps < 0:
        raise invalid(f"table {name!r}: ttl_steps must be >= 0 (0: no expiry), got "
                      f"{spec.ttl_steps}")
    if not (isinstance(spec.ttl_s, (int, float)) and math.isfinite(spec.ttl_s)
            and spec.ttl_s >= 0):
        raise invalid(f"table {name!r}: ttl_s must be a finite number >= 0 (0: no expiry), "
                      f"got {spec.ttl_s!r}")
    if spec.evict not in EVICTION_POLICIES:
        raise invalid(f"table {name!r}: evict must be one of "
                      f"{', '.join(EVICTION_POLICIES)}, got {spec.evict!r}")


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


# The table itself lives in ps.tables (bounded: admission, a cap, TTL, deltas); imported
# here, after TableSpec and initial_rows which it uses, so `ps.embedding.Table` still works.
from .tables.table import Table, _distinct_in_order  # noqa: E402,F401
