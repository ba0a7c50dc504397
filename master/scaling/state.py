"""What the policy remembers between intervals, as one frozen value the caller persists (a
standby that takes over continues from it): targets, the hot-interval count, the last PS
change, since when each market's launches have been pending, which markets it stopped
launching on, the throughput probe in flight, the crash back-off and the deadline's pace."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True)
class Block:
    """A market the policy stopped launching workers on: since when, and whether the engine has
    since said it admits no launches (a return after that is a real return, not a probe)."""

    since: float
    saw_closed: bool = False


@dataclass(frozen=True)
class Probe:
    """A worker added for throughput, to be judged one interval after it runs: records/s and
    the live count before it, and when every worker was up (None: not yet)."""

    base_rps: float
    base_count: int
    ready_at: float | None = None


@dataclass(frozen=True)
class PolicyState:
    started: float | None = None
    workers: int | None = None            # the worker target over all markets
    ps: int | None = None                 # the PS set's target size
    hot_intervals: int = 0                # consecutive intervals with some PS hot
    cold_intervals: int = 0               # ... with every PS cold
    last_ps_change: float | None = None
    pending_since: Mapping[str, float] = field(default_factory=dict)
    blocked: Mapping[str, Block] = field(default_factory=dict)
    probe: Probe | None = None
    last_gain: float | None = None        # records/s the last worker added brought
    hold_until: float | None = None       # after a no_gain: no probe before this ...
    hold_ps: int | None = None            # ... unless the PS count moved from this
    crash_streak: int = 0
    backoff_until: float | None = None
    # per market: launches cancelled as stuck since one there last started (doubles the wait
    # before the market is tried again, and the return goes one worker at a time meanwhile)
    stuck_strikes: Mapping[str, int] = field(default_factory=dict)
    # scaling.deadline_h: whether the job was ahead of its uniform-progress line at the last
    # interval, and the worker count the wait held then (None: it held none; below `workers`
    # while the first market admits no launches)
    paced: bool = False
    held: int | None = None
    worker_speed: float | None = None     # records/s per running worker, last read settled
    ps_speed: float | None = None         # records/s per PS at full CPU, likewise
    running_workers: int | None = None    # at the last interval: a speed read needs the same

    def __post_init__(self):
        object.__setattr__(self, "pending_since", MappingProxyType(dict(self.pending_since)))
        object.__setattr__(self, "blocked", MappingProxyType(dict(self.blocked)))
        object.__setattr__(self, "stuck_strikes", MappingProxyType(dict(self.stuck_strikes)))

    def with_(self, **changes) -> "PolicyState":
        if all(getattr(self, k) == v for k, v in changes.items()):
            return self  # most intervals change nothing: skip the copy
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for the master's database; from_dict reads it back."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["pending_since"] = dict(self.pending_since)
        out["stuck_strikes"] = dict(self.stuck_strikes)
        out["blocked"] = {m: asdict(b) for m, b in self.blocked.items()}
        out["probe"] = None if self.probe is None else asdict(self.probe)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PolicyState":
        data = dict(data)
        data["blocked"] = {m: Block(**b) for m, b in (data.get("blocked") or {}).items()}
        if data.get("probe") is not None:
            data["probe"] = Probe(**data["probe"])
        return cls(**data)
