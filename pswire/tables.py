"""An embedding table's declaration, as workers send it and every PS checks it.

`TableSpec` is what `ElasticEmbedding`, `PSClient` and the `InitParameters` request carry; the
PS builds its tables from it (ps/embedding.py) and both sides check it the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rpckit.errors import invalid

INITIALIZERS = ("normal", "uniform", "zeros")
MAX_DIM = 65_536


@dataclass(frozen=True)
class TableSpec:
    name: str
    dim: int
    initializer: str = "normal"
    init_a: float = 0.0
    init_b: float = 0.01
    seed: int = 0
    num_embeddings: int = 0  # ids must be below it; 0: unbounded

    def check(self) -> None:
        if not self.name:
            raise invalid("a table needs a name")
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
