"""The deterministic hand-out order of an epoch's shards, without materialising it.

`ShardOrder(n, key).index_at(p)` is a bijection of [0, n): a 4-round Feistel network over the
smallest even power of two >= n, cycle-walked back into range. It costs O(1) memory whatever n
is (10^6 shards need no 8 MB list per epoch), and the same (n, key) gives the same order on any
machine and after any restart, because it depends on blake2b alone, not on a library's RNG.
"""
from __future__ import annotations

import hashlib
import struct


class ShardOrder:
    def __init__(self, n: int, key: int | None):
        """`key` None means identity order (no shuffle)."""
        if n <= 0:
            raise ValueError("n must be positive")
        self.n = n
        self.key = key
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self._half = bits // 2
        self._mask = (1 << self._half) - 1
        if key is not None:
            self._round_keys = [
                hashlib.blake2b(struct.pack("<qi", key, r), digest_size=8).digest()
                for r in range(4)
            ]

    def _round(self, r: int, value: int) -> int:
        digest = hashlib.blake2b(
            value.to_bytes(8, "little"), digest_size=8, key=self._round_keys[r]
        ).digest()
        return int.from_bytes(digest, "little") & self._mask

    def _permute(self, x: int) -> int:
        left, right = x >> self._half, x & self._mask
        for r in range(4):
            left, right = right, left ^ self._round(r, right)
        return (left << self._half) | right

    def index_at(self, position: int) -> int:
        if not 0 <= position < self.n:
            raise IndexError(position)
        if self.key is None:
            return position
        x = self._permute(position)
        while x >= self.n:  # cycle-walk: at most a few steps since the domain is < 4n
            x = self._permute(x)
        return x
