"""What the policy sees each interval: a frozen snapshot the driver builds from the lease ledger,
the PS status and the engine's events. Counts are keyed by (role, market)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

Key = tuple[str, str]  # (role, market); ProcessKind is a str enum: ProcessKind.WORKER == "worker"


def _frozen(counts: Mapping[Key, int] | None) -> Mapping[Key, int]:
    return MappingProxyType({(str(getattr(r, "value", r)), m): int(n)
                             for (r, m), n in (counts or {}).items() if n})


@dataclass(frozen=True)
class Signals:
    """One interval's view. `running` counts processes up and not under a preemption notice;
    `pending` those launched and not yet up; `preempting` those under a notice, still in their
    grace (no longer counted as live). `preempted`, `lost`, `crashed` (lost within their
    start-up: a command that exits at once) and `failed_launches` count what happened since the
    previous decide. `admits` is the set of markets that admit launches now (None: all).
    `prices` overrides the spec's price per process-hour per market (e.g. a spot price feed).
    `records_done` / `records_total`: the job's progress from the lease ledger, every dataset's
    records times its epochs (total 0: not known yet, e.g. before a worker created a dataset)."""

    records_per_s: float = 0.0
    worker_rps: float = 0.0          # per-worker speed: records/s over running workers
    ps_cpu: tuple[float, ...] = ()   # each PS's busy fraction of its CPU, 0..1
    running: Mapping[Key, int] = field(default_factory=dict)
    pending: Mapping[Key, int] = field(default_factory=dict)
    preempting: Mapping[Key, int] = field(default_factory=dict)
    preempted: Mapping[Key, int] = field(default_factory=dict)
    lost: Mapping[Key, int] = field(default_factory=dict)
    crashed: Mapping[Key, int] = field(default_factory=dict)
    failed_launches: Mapping[Key, int] = field(default_factory=dict)
    admits: frozenset[str] | None = None
    prices: Mapping[str, float] = field(default_factory=dict)
    records_done: float = 0.0
    records_total: float = 0.0

    def __post_init__(self):
        for name in ("running", "pending", "preempting", "preempted", "lost", "crashed",
                     "failed_launches"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        object.__setattr__(self, "ps_cpu", tuple(float(c) for c in self.ps_cpu))
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        if self.admits is not None:
            object.__setattr__(self, "admits", frozenset(self.admits))

    def live(self, role: str, market: str) -> int:
        """Processes that count toward a target: running or pending, not under a notice."""
        key = (str(getattr(role, "value", role)), market)
        return self.running.get(key, 0) + self.pending.get(key, 0)

    def total(self, counts: Mapping[Key, int], role: str) -> int:
        role = str(getattr(role, "value", role))
        return sum(n for (r, _), n in counts.items() if r == role)

    def admits_launches(self, market: str) -> bool:
        return self.admits is None or market in self.admits

    def summary(self) -> dict[str, Any]:
        """A JSON-able copy, kept with every decision's event."""
        def flat(counts):
            return {f"{r}/{m}": n for (r, m), n in sorted(counts.items())}
        return {
            "records_per_s": round(self.records_per_s, 3),
            "worker_rps": round(self.worker_rps, 3),
            "ps_cpu": [round(c, 3) for c in self.ps_cpu],
            "running": flat(self.running), "pending": flat(self.pending),
            "preempting": flat(self.preempting), "preempted": flat(self.preempted),
            "lost": flat(self.lost), "crashed": flat(self.crashed),
            "failed_launches": flat(self.failed_launches),
            "admits": None if self.admits is None else sorted(self.admits),
            "records_done": int(self.records_done), "records_total": int(self.records_total),
        }
