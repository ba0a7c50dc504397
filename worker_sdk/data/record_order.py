"""Which record a lease reads at each of its positions (the in-shard order).

A lease covers positions of one shard: shard `index` is the record range
[index * shard_size, min((index + 1) * shard_size, num_records)), and a lease [start, end) of it
(the whole shard, or a remainder after a partial requeue) consumes the shard's positions
start - shard_start .. end - shard_start - 1, in order. Position p reads record
shard_start + perm[p], where perm is the identity without shuffle and otherwise a permutation of
the *whole* shard that depends only on (seed, epoch, index). So the offset a worker reports
(positions consumed) means the same records to every worker, and the remainder
[start + k, end) handed to someone else yields exactly the records not yet trained.

The permutation sorts 64-bit keys from splitmix64 over a blake2b-derived base: it is the same on
every machine and every numpy version, as it uses no library RNG.
"""
from __future__ import annotations

import hashlib
import struct
from functools import lru_cache

import numpy as np

from pswire.slots import GOLDEN, splitmix64


@lru_cache(maxsize=8)  # a worker holds a handful of leases at a time
def shard_permutation(seed: int, epoch: int, index: int, length: int) -> np.ndarray:
    """perm[p] = offset within the shard of the record read at position p."""
    digest = hashlib.blake2b(struct.pack("<qqq", seed, epoch, index), digest_size=8).digest()
    base = np.uint64(int.from_bytes(digest, "little"))
    with np.errstate(over="ignore"):
        keys = splitmix64(base + np.arange(length, dtype=np.uint64) * GOLDEN)
    perm = np.argsort(keys, kind="stable")
    perm.setflags(write=False)
    return perm


class ShardLayout:
    """The record read at each position of a lease, for one dataset spec."""

    def __init__(self, num_records: int, shard_size: int, shuffle: bool, seed: int):
        self.num_records = num_records
        self.shard_size = shard_size
        self.shuffle = shuffle
        self.seed = seed

    def shard_range(self, index: int) -> tuple[int, int]:
        start = index * self.shard_size
        return start, min(start + self.shard_size, self.num_records)

    def record(self, epoch: int, index: int, start: int, k: int) -> int:
        """The record read at position k of a lease that begins at record `start`."""
        shard_start, shard_end = self.shard_range(index)
        position = start - shard_start + k
        if not 0 <= position < shard_end - shard_start:
            raise IndexError(f"position {position} is outside shard {index}")
        if not self.shuffle:
            return shard_start + position
        perm = shard_permutation(self.seed, epoch, index, shard_end - shard_start)
        return shard_start + int(perm[position])

    def records(self, epoch: int, index: int, start: int, k: int, n: int) -> slice | np.ndarray:
        """The records read at positions k .. k + n - 1 of a lease that begins at `start`: a
        slice when they are consecutive (no shuffle), else an int64 index array (a gather)."""
        shard_start, shard_end = self.shard_range(index)
        first = start - shard_start + k
        if n < 0 or not 0 <= first <= first + n <= shard_end - shard_start:
            raise IndexError(f"positions {first}..{first + n} are outside shard {index}")
        if not self.shuffle:
            return slice(shard_start + first, shard_start + first + n)
        perm = shard_permutation(self.seed, epoch, index, shard_end - shard_start)
        return perm[first:first + n] + shard_start
