"""What the policy decides: typed decisions, each with the reason an operator reads in
`scale_decided` events, `elastic-ctl plan` and the job's summary."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from engines.port import ProcessKind


class Reason(str, enum.Enum):
    BELOW_MIN = "below_min"                  # fewer than workers.min / ps.min live
    REPLACE_PREEMPTED = "replace_preempted"  # a preemption notice took one away
    REPLACE_LOST = "replace_lost"            # one died or vanished without a notice
    MARKET_UNAVAILABLE = "market_unavailable"  # a launch failed or stayed pending: next market
    MARKET_RETURNED = "market_returned"      # a preferred market admits launches again
    THROUGHPUT_GAIN = "throughput_gain"      # the last worker added paid for itself: one more
    NO_GAIN = "no_gain"                      # it did not: one fewer
    PS_HOT = "ps_hot"                        # a PS above ps_hot_cpu for ps_hot_intervals
    PS_COLD = "ps_cold"                      # every PS below ps_cold_cpu
    BUDGET = "budget"                        # over budget_per_hour
    ABOVE_MAX = "above_max"                  # more than workers.max / ps.max live
    # an extension of the round-4 contract (scaling.deadline_h): ahead of the deadline's
    # uniform-progress line, workers the first market took away are not replaced on a later
    # one (from == to), and those on later markets are drained
    AHEAD_OF_DEADLINE = "ahead_of_deadline"


@dataclass(frozen=True)
class Decision:
    """Make the live processes of `role` on `market` go from `from_count` to `to_count`:
    launch the difference, or drain it (SIGTERM: workers hand their leases back exactly). For
    the PS role the count is the PS set's size, changed by a live resize. `signals` is what
    the policy saw (Signals.summary()), kept with the `scale_decided` event. Only an
    `ahead_of_deadline` decision may keep the count (from == to): workers the first market took
    away, not replaced while the job is ahead of its deadline."""

    role: ProcessKind  # WORKER or PS: the master is not scaled
    market: str
    from_count: int
    to_count: int
    reason: Reason
    signals: Mapping[str, Any]

    @property
    def delta(self) -> int:
        return self.to_count - self.from_count

    def as_event(self) -> dict:
        """The fields of a `scale_decided` event."""
        return {"role": self.role.value, "market": self.market, "from": self.from_count,
                "to": self.to_count, "reason": self.reason.value, "signals": dict(self.signals)}
