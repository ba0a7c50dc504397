"""A dataset's spec: validation, and the record range each shard index names."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from rpckit.errors import invalid
from .shard_order import ShardOrder

MAX_NAME = 128
DEFAULT_LEASE_TIMEOUT_S = 600.0
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


def check_name(kind: str, name: str) -> None:
    if not name:
        raise invalid(f"{kind} name is empty; give a name of 1-{MAX_NAME} characters")
    if len(name) > MAX_NAME:
        raise invalid(f"{kind} name is {len(name)} characters long; the limit is {MAX_NAME}")
    if kind == "dataset" and not _NAME_RE.match(name):
        raise invalid(
            f"dataset name {name!r} has characters other than letters, digits and ._:/-"
        )


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
        check_name("dataset", self.name)
        for field in ("num_records", "shard_size", "num_epochs"):
            value = getattr(self, field)
            if value <= 0:
                raise invalid(f"dataset {self.name!r}: {field} must be > 0 (got {value})")
        if self.num_records > 1 << 50 or self.num_epochs > 1 << 20:
            raise invalid(f"dataset {self.name!r}: num_records or num_epochs is too large")
        if self.lease_timeout_s < 0 or self.lease_timeout_s != self.lease_timeout_s:
            raise invalid(f"dataset {self.name!r}: lease_timeout_s must be >= 0 (0 = 600 s)")

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
