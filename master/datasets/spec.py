"""A dataset's spec: validation, and the record range each shard index names."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..limits import (
    MAX_EPOCHS, MAX_LEASE_TIMEOUT_S, MAX_RECORDS, MAX_SEED, check_int, check_name,
    check_seconds,
)
from .shard_order import ShardOrder

DEFAULT_LEASE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    num_records: int
    shard_size: int
    num_epochs: int = 1
    shuffle: bool = False
    seed: int = 0
    lease_timeout_s: float = 0.0

    def validate(self) -> None:
        """Refuse a spec any later step could not carry (see master/limits.py)."""
        check_name("dataset", self.name)
        check_int("num_records", self.num_records, 1, MAX_RECORDS)
        check_int("shard_size", self.shard_size, 1, MAX_RECORDS)
        check_int("num_epochs", self.num_epochs, 1, MAX_EPOCHS)
        # the shuffle key is seed + epoch, packed as int64 (master/datasets/shard_order.py)
        check_int("seed", self.seed, -MAX_SEED, MAX_SEED)
        check_seconds("lease_timeout_s (0 means 600 s)", self.lease_timeout_s,
                      MAX_LEASE_TIMEOUT_S)

    @property
    def num_shards(self) -> int:
        return -(-self.num_records // self.shard_size)

    @property
    def lease_timeout(self) -> float:
        return self.lease_timeout_s or DEFAULT_LEASE_TIMEOUT_S

    def shard_range(self, index: int) -> tuple[int, int]:
        start = index * self.shard_size
        return start, min(start + self.shard_size, self.num_records)

    def order(self, epoch: int) -> ShardOrder:
        return ShardOrder(self.num_shards, self.seed + epoch if self.shuffle else None)

    def differences(self, other: "DatasetSpec") -> list[str]:
        mine, theirs = asdict(self), asdict(other)
        return [f"{k}={mine[k]!r} (asked: {theirs[k]!r})" for k in mine if mine[k] != theirs[k]]

    def as_row(self) -> dict:
        return asdict(self)
