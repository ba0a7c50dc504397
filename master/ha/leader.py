"""Who leads: the decisions of the leader lease, on an injected monotonic clock, without I/O.

Every master on one database runs a `LeaderLease` over the one row of the `leader` table
(holder, address, term, version). The leader bumps `version` every `renew_s`; a standby
watches the row and takes it over once it has seen no change for `lease_s` on its *own*
monotonic clock (no clock is compared across machines, as in Kubernetes' leader election).
A leader counts its lease from the moment it *started* the renewal that succeeded, so it
believes in its lease no longer than any standby waits: when `serving` turns false, it stops.

Safety does not rest on the clocks: every commit of the leader is fenced by the row (see
`master/ha/election.py`), so a leader that was deposed while it was frozen cannot write, whatever
it believes. The clocks only decide when to take over and when to stop answering reads.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable


class Leadership(str, enum.Enum):
    """Where this master process stands with the leader lease."""

    STANDBY = "standby"
    LEADER = "leader"
    STOPPED = "stopped"  # lost the lease: this process no longer serves (it exits)


class Action(str, enum.Enum):
    WAIT = "wait"            # nothing to do before next_poll()
    ACQUIRE = "acquire"      # try to take the row over (from the row observed last)
    RENEW = "renew"          # bump the version of our row
    STEP_DOWN = "step_down"  # the lease ran out before a renewal succeeded


@dataclass(frozen=True)
class LeaseRow:
    """The `leader` row as read; holder '' means free (the last leader stepped down cleanly)."""

    holder: str
    address: str
    term: int
    version: int


class LeaderLease:
    def __init__(self, holder: str, address: str, lease_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        if lease_s <= 0:
            raise ValueError("lease_s must be > 0")
        self.holder = holder
        self.address = address
        self.lease_s = lease_s
        self.renew_s = lease_s / 3  # two renewals may fail before the lease runs out
        self.poll_s = min(0.1, lease_s / 10)  # a standby's look at the row
        self.clock = clock
        self.role = Leadership.STANDBY
        self.term = 0
        self._seen: LeaseRow | None = None
        self._seen_at = 0.0
        self._valid_until = 0.0
        self._renew_started = 0.0  # of the last successful renewal (or the acquisition)

    # ---- standby ------------------------------------------------------------------------------

    def observe(self, row: LeaseRow) -> Action:
        """A standby read `row`: take it over when it is free, when its holder sat on our own
        address (that process is gone: we hold its port now), or when it did not change for a
        whole lease on our clock."""
        now = self.clock()
        if row != self._seen:
            self._seen, self._seen_at = row, now
        if not row.holder or row.address == self.address:
            return Action.ACQUIRE
        return Action.ACQUIRE if now - self._seen_at >= self.lease_s else Action.WAIT

    def acquired(self, term: int, started: float) -> None:
        """The takeover that began at `started` (this clock) committed with `term`."""
        self.role = Leadership.LEADER
        self.term = term
        self._renew_started = started
        self._valid_until = started + self.lease_s

    # ---- leader -------------------------------------------------------------------------------

    def due(self) -> Action:
        """What the leader must do now."""
        now = self.clock()
        if now >= self._valid_until:
            return Action.STEP_DOWN
        if now - self._renew_started >= self.renew_s:
            return Action.RENEW
        return Action.WAIT

    def renewed(self, started: float) -> None:
        self._renew_started = started
        self._valid_until = started + self.lease_s

    def lost(self) -> None:
        """The lease is gone (another master holds it, or it ran out): stop serving."""
        self.role = Leadership.STOPPED

    @property
    def serving(self) -> bool:
        return self.role is Leadership.LEADER and self.clock() < self._valid_until

    def next_poll(self) -> float:
        """Seconds until the next look at the row."""
        if self.role is Leadership.LEADER:
            now = self.clock()
            return max(0.0, min(self._renew_started + self.renew_s, self._valid_until) - now)
        return self.poll_s
