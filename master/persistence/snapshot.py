"""What a store hands the core at start-up: the durable state, as rows, to rebuild from.

`Store.load()` (master/persistence/store.py) fills it; `MasterCore` (master/core.py) rebuilds
every in-memory structure from it, at start and after a call broke in the middle.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Snapshot:
    """The durable state a store hands back at start-up."""

    datasets: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    leases: list[dict] = field(default_factory=list)  # active (state doing) only
    pieces: list[dict] = field(default_factory=list)
    workers: list[dict] = field(default_factory=list)
    ps: list[dict] = field(default_factory=list)
    ps_generations: list[dict] = field(default_factory=list)
    ps_backups: list[dict] = field(default_factory=list)
    ps_layout: list[dict] = field(default_factory=list)  # no row, or the one row (id 1)
    ps_slot_ranges: list[dict] = field(default_factory=list)
    ps_slot_moves: list[dict] = field(default_factory=list)
    max_lease_id: int = 0
    max_piece_key: int = 0
    max_event_seq: int = 0
