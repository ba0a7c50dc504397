"""A sparse embedding table: rows created lazily and deterministically, updated row-wise.

A row's initial value is a pure function of (seed, table name, id, column), computed with a
counter-based generator (splitmix64), so every PS and every restart create the same row
whatever order ids arrive in, and a table can be split over PS by id with no coordination.
The table that holds the rows (admission, a cap, TTL, deltas) is ps.store.tables.table.Table.
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch

from pswire.slots import GOLDEN, splitmix64
from pswire.tables import TableSpec

from .tables.kernels import initial_rows as compiled

def _unit(bits: np.ndarray) -> np.ndarray:
    """Uniform float64 in (0, 1] from 64 random bits (53 of them)."""
    return ((bits >> np.uint64(11)).astype(np.float64) + 1.0) * (1.0 / 2**53)


@functools.lru_cache(maxsize=256)
def _table_key(seed: int, name: str) -> np.uint64:
    key = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(key, "little"))


def initial_rows(spec: TableSpec, ids: np.ndarray) -> torch.Tensor:
    """The initial float32 rows [len(ids), dim] of `ids` (int64, all >= 0): one compiled pass
    (ps/store/tables/kernels.py; `initial_rows_reference` is the same in numpy)."""
    n = len(ids)
    if spec.initializer == "zeros" or n == 0:
        return torch.zeros(n, spec.dim)
    keys = np.ascontiguousarray(ids, dtype=np.int64)
    return torch.from_numpy(compiled(keys, _table_key(spec.seed, spec.name), spec.dim,
                                     spec.initializer != "uniform", float(spec.init_a),
                                     float(spec.init_b)))


def initial_args(spec: TableSpec) -> tuple[int, np.uint64, float, float]:
    """What `kernels.create_rows` takes of `spec` to write `initial_rows`' values in place:
    (0 zeros, 1 normal or 2 uniform; the table's key; a; b)."""
    kind = {"zeros": 0, "uniform": 2}.get(spec.initializer, 1)
    return kind, _table_key(spec.seed, spec.name), float(spec.init_a), float(spec.init_b)


def initial_rows_reference(spec: TableSpec, ids: np.ndarray) -> torch.Tensor:
    """`initial_rows` in numpy (what the compiled loop is tested against)."""
    n = len(ids)
    if spec.initializer == "zeros" or n == 0:
        return torch.zeros(n, spec.dim)
    base = _table_key(spec.seed, spec.name)
    rows = splitmix64(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ base)[:, None]
    if spec.initializer == "uniform":
        cols = np.arange(spec.dim, dtype=np.uint64)[None, :]
        u = _unit(splitmix64(rows + cols * GOLDEN))  # uint64 arrays wrap without a warning
        values = spec.init_a + (spec.init_b - spec.init_a) * (u - 2.0**-53)
    else:  # normal: Box-Muller, one pair of counters gives two columns (cos and sin)
        pairs = (spec.dim + 1) // 2
        # counters 2k (u1) and 2k + 1 (u2) of pair k, mixed in one pass
        counters = np.arange(2 * pairs, dtype=np.uint64)[None, :]
        u = _unit(splitmix64(rows + counters * GOLDEN))  # uint64 arrays wrap without a warning
        u1, u2 = u[:, 0::2], u[:, 1::2]
        radius = np.sqrt(-2.0 * np.log(u1))
        angle = (2.0 * np.pi) * u2
        z = np.empty((n, pairs * 2))
        z[:, 0::2] = radius * np.cos(angle)
        z[:, 1::2] = radius * np.sin(angle)
        values = spec.init_a + spec.init_b * z[:, : spec.dim]
    return torch.from_numpy(values.astype(np.float32))

