"""An embedding table's declaration, as workers send it and every PS checks it.

`TableSpec` is what `ElasticEmbedding`, `PSClient` and the `InitParameters` request carry; the
PS builds its tables from it (ps/store/embedding.py). Both sides check it with the same code,
`TableSpec.problem`: the SDK raises it (`SpecError`, a ValueError naming the field) before
anything is sent, the PS refuses it (`check`: INVALID_ARGUMENT, reason INVALID_ARGUMENT, the
same message). `spec_from_pb` / `spec_to_pb` are the one conversion to and from the wire.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from protos import ps_pb2
from rpckit.errors import invalid, quote

INITIALIZERS = ("normal", "uniform", "zeros")
MAX_DIM = 65_536
MAX_ADMIT_AFTER = 65_535  # the admission sketch counts in uint16
MAX_NAME = 256  # characters of a table's name
MAX_ID_BOUND = 2**53  # num_embeddings at most: ids are at most pswire.partition.MAX_ROW_ID
MAX_INT64 = 2**63 - 1
EVICTION_POLICIES = ("lru", "lfu")
# what may change on a running job (a later InitParameters): how many rows a table keeps and
# which, never what a row holds or how it starts (docs/ps.md, "Changing a table's bounds")
RETUNABLE = ("max_rows", "ttl_s", "ttl_steps", "evict")


@dataclass(frozen=True)
class TableSpec:
    name: str
    dim: int
    initializer: str = "normal"
    init_a: float = 0.0
    init_b: float = 0.01
    seed: int = 0
    num_embeddings: int = 0  # ids must be below it; 0: unbounded
    # bounded tables (docs/ps.md "Bounded embedding tables"; ps.store.tables)
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

    def problem(self) -> SpecError | None:
        """The first bad field (a `SpecError` naming it), or None."""
        try:
            _check_fields(self)
        except SpecError as exc:
            return exc
        return None

    def validate(self) -> None:
        """SpecError (a ValueError naming the field) for a bad field: the SDK's check."""
        problem = self.problem()
        if problem is not None:
            raise problem

    def check(self) -> None:
        """INVALID_ARGUMENT (reason INVALID_ARGUMENT) naming the field: the PS's check."""
        problem = self.problem()
        if problem is not None:
            raise invalid(str(problem))


class SpecError(ValueError):
    """A bad field of a table declaration; `field` names it (as TableSpec spells it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _check_fields(spec: TableSpec) -> None:
    if not isinstance(spec.name, str) or not spec.name:
        raise SpecError("name", f"a table needs a name (a non-empty string), got "
                                f"{quote(spec.name)}")
    if len(spec.name) > MAX_NAME:
        raise SpecError("name", f"table {quote(spec.name)}: the name has {len(spec.name)} "
                                f"characters; at most {MAX_NAME}")
    name = quote(spec.name)
    for field, low, high in (("dim", 1, MAX_DIM), ("seed", -MAX_INT64 - 1, MAX_INT64),
                             ("num_embeddings", 0, MAX_ID_BOUND), ("max_rows", 0, MAX_INT64),
                             ("admit_after", 1, MAX_ADMIT_AFTER), ("ttl_steps", 0, MAX_INT64)):
        value = getattr(spec, field)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SpecError(field, f"table {name}: {field} must be an integer, got {value!r}")
        if not low <= value <= high:
            bounds = f">= {low}" if high == MAX_INT64 else f"in {low}..{high}"
            raise SpecError(field, f"table {name}: {field} must be {bounds}"
                                   f"{_MEANING.get(field, '')}, got {value}")
    for field in ("init_a", "init_b", "ttl_s"):
        value = getattr(spec, field)
        if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating))
                or not math.isfinite(value)):
            raise SpecError(field, f"table {name}: {field} must be a finite number, got "
                                   f"{value!r}")
    if spec.ttl_s < 0:
        raise SpecError("ttl_s", f"table {name}: ttl_s must be >= 0 (0: no expiry), got "
                                 f"{spec.ttl_s!r}")
    for field, allowed in (("initializer", INITIALIZERS), ("evict", EVICTION_POLICIES)):
        value = getattr(spec, field)
        if value not in allowed:
            raise SpecError(field, f"table {name}: {field} must be one of "
                                   f"{', '.join(allowed)}, got {quote(value)}")
    if spec.initializer == "normal" and spec.init_b < 0:
        raise SpecError("init_b", f"table {name}: normal std (init_b) must be >= 0")
    if spec.initializer == "uniform" and spec.init_b < spec.init_a:
        raise SpecError("init_b", f"table {name}: uniform needs init_a <= init_b")


_MEANING = {"num_embeddings": " (0: unbounded ids)", "max_rows": " (0: unbounded)",
            "admit_after": " (1: a row at the first sighting)", "ttl_steps": " (0: no expiry)"}


def spec_from_pb(msg: ps_pb2.TableSpec) -> TableSpec:
    """The declaration an InitParameters carries (empty strings and an unset admit_after are
    the defaults; a 0 admit_after is kept, for `check` to refuse)."""
    return TableSpec(name=msg.name, dim=msg.dim, initializer=msg.initializer or "normal",
                     init_a=msg.init_a, init_b=msg.init_b, seed=msg.seed,
                     num_embeddings=msg.num_embeddings, max_rows=msg.max_rows,
                     admit_after=msg.admit_after if msg.HasField("admit_after") else 1,
                     ttl_s=msg.ttl_s, ttl_steps=msg.ttl_steps, evict=msg.evict or "lru")


def spec_to_pb(spec: TableSpec) -> ps_pb2.TableSpec:
    return ps_pb2.TableSpec(name=spec.name, dim=spec.dim, initializer=spec.initializer,
                            init_a=spec.init_a, init_b=spec.init_b, seed=spec.seed,
                            num_embeddings=spec.num_embeddings, max_rows=spec.max_rows,
                            admit_after=spec.admit_after, ttl_s=spec.ttl_s,
                            ttl_steps=spec.ttl_steps, evict=spec.evict)


def spec_changes(held: TableSpec, declared: TableSpec) -> list[tuple[str, object, object]]:
    """(field, held, declared) for each field of `declared` that differs, in field order."""
    return [(f.name, getattr(held, f.name), getattr(declared, f.name)) for f in fields(TableSpec)
            if getattr(held, f.name) != getattr(declared, f.name)]
