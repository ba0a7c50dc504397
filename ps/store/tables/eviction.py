"""Which rows leave a table: TTL expiry and the cap's choice of victims (LRU or LFU).

Pure functions over the table's per-place metadata (numpy arrays indexed by place), so the
rules are tested without a table. A table calls them under its lock.
"""
from __future__ import annotations

from enum import Enum

import numpy as np


class Cause(str, Enum):
    """Why a row left (the `cause` label of elasticps_ps_table_evicted_total)."""

    TTL = "ttl"
    CAP = "cap"


def expired(live: np.ndarray, steps: np.ndarray, touched: np.ndarray, *, pushes: int,
            now: float, ttl_steps: int, ttl_s: float) -> np.ndarray:
    """Places (among `live`) untouched for more than `ttl_steps` pushes or `ttl_s` seconds."""
    out = np.zeros(live.size, dtype=bool)
    if ttl_steps:
        out |= pushes - steps[live] > ttl_steps
    if ttl_s:
        out |= now - touched[live] > ttl_s
    return live[out]


def next_expiry(live: np.ndarray, steps: np.ndarray, touched: np.ndarray, *, ttl_steps: int,
                ttl_s: float) -> tuple[int | None, float | None]:
    """The first push count and time at which some row of `live` may expire (None: never).
    Touches only move these later, so no row expires before them."""
    if not live.size:
        return None, None
    step = int(steps[live].min()) + ttl_steps + 1 if ttl_steps else None
    at = float(touched[live].min()) + ttl_s if ttl_s else None
    return step, at


def victims(candidates: np.ndarray, count: int, policy: str, counts: np.ndarray,
            ticks: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`count` places of `candidates` to evict: least recently touched (lru: smallest tick) or
    least often (lfu: smallest count, then least recently touched), ties broken by the
    smaller id. The choice depends on the rows' ids and metadata only, never on which place a
    row sits in: a backup, whose places may be ordered otherwise after it copied its primary,
    evicts the same ids."""
    if count <= 0 or not candidates.size:
        return candidates[:0]
    if count >= candidates.size:
        return candidates
    if policy == "lfu":
        # counts below 2**31 and ticks below 2**32 keep this exact in an int64
        key = (np.minimum(counts[candidates], 2**31 - 1) << 32) | (ticks[candidates] & 0xFFFFFFFF)
    else:
        key = ticks[candidates]
    edge = np.partition(key, count - 1)[count - 1]  # the key of the last one taken
    below = candidates[key < edge]
    tied = candidates[key == edge]
    tied = tied[np.argsort(ids[tied], kind="stable")[:count - below.size]]
    return np.concatenate([below, tied])
