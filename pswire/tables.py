"""An embedding table's declaration, as workers send it and every PS checks it.

`TableSpec` is what `ElasticEmbedding`, `PSClient` and the `InitParameters` request carry; the
PS builds its tables from it (ps/embedding.py) and both sides check it the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rpckit.errors import invalid

INITIALIZERS = ("normal", "uniform", "zeros")
MAX_DIM = 65_536
MAX_ADMIT_AFTER = 65_535  # the admission sketch counts in uint16
EVICTION_POLICIES = ("lru", "lfu")


@dataclass(frozen=True)
class TableSpec:
    name: str
    dim: int
    initializer: str = "normal"
    init_a: float = 0.0
    init_b: float = 0.01
    seed: int = 0
    num_embeddings: int = 0  # ids must be below it; 0: unbounded
    # bounded tables (docs/ps.md "Bounded embedding tables"; ps.tables)
    max_rows: int = 0        # rows held over all PS; 0: unbounded
    admit_after: int = 1     # a row is created at this sighting of its id
    ttl_s: float = 0.0       # rows untouched this many seconds are evicted; 0: never
    ttl_steps: int = 0       # ... or this many of the table's pushes; 0: never
    evict: str = "lru"       # which rows make room at max_rows: "lru" or "lfu"

    @property
    def stateful_reads(self) -> bool:
        """Whether a pull of this table changes what the PS holds beyond creating rows at
        their initial values: it counts a sighting (admission), may evict at the cap, and
        moves the touch order that LRU/LFU and the TTL read. Such pulls are replicated to
        backups in order, like pushes, so a backup holds the same rows."""
        return (self.max_rows > 0 or self.admit_after > 1 or self.ttl_s > 0
                or self.ttl_steps > 0)

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
