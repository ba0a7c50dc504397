"""What a worker's calls carry into the core and get back: a report on a lease, the core's
result for it, and GetShard's grant. Plain values; `MasterCore` (master/core.py) decides."""
from __future__ import annotations

from dataclasses import dataclass

from .datasets.shards import Lease
from .states import Grant, Outcome


@dataclass
class Report:
    lease_id: int
    outcome: Outcome | str  # an Outcome; anything else is refused on its own
    records_done: int = 0
    message: str = ""


@dataclass
class Result:
    lease_id: int
    accepted: bool
    duplicate: bool = False
    reason: str = ""


@dataclass
class ShardGrant:
    status: Grant
    leases: list[Lease]
    results: list[Result]
    retry_after_ms: int = 0
