"""Primary leases on the master: when a PS primary may still be answering pushes.

With `--ps-replicas` a primary answers a mutation only while it holds a lease (ps/replication/lease.py),
renewed by each successful `ReportReplicas`; the PS counts the lease from the moment it SENT
the renewal, on its own monotonic clock. The master records a grant when it answers one, on
its monotonic clock, which is after the PS sent it: so the PS's lease always ends before
`granted + lease_s` here. `margin_s` covers clock rates that differ a little and a PS thread
held up between its last lease check and its send.

What it decides: `left(index)`, the seconds until the current primary of `index` can no longer
answer anything on its own. The master makes another primary of an index without waiting for
it only by promoting an in-sync backup (the old primary cannot answer a push without that
backup's acknowledgement, and the promoted backup refuses to give one); a backup that is not
in sync, or a new process, becomes the primary only once `left` is 0 (master/ps/registry.py).

Nothing is stored: a master that starts (or takes over as leader, or rebuilds its state)
assumes every primary was granted a lease the moment it started, the latest any earlier
master could have granted one.
"""
from __future__ import annotations

from typing import Callable

LEASE_S = 2.0     # how long a grant lasts (told to the PS in each ReportReplicas answer)
MARGIN_S = 0.5    # added on the master's side before it replaces a primary on its own


class PrimaryLeases:
    def __init__(self, clock: Callable[[], float], lease_s: float = LEASE_S,
                 margin_s: float = MARGIN_S):
        if not lease_s > 0 or margin_s < 0:
            raise ValueError("lease_s must be > 0 and margin_s >= 0")
        self.clock = clock
        self.lease_s = lease_s
        self.margin_s = margin_s
        self.started = clock()
        self._granted: dict[int, float] = {}  # index -> last grant to its current primary

    def grant(self, index: int) -> float:
        """Record a renewal answered to the current primary of `index`; returns the lease's
        length in seconds (what the PS is told)."""
        self._granted[index] = self.clock()
        return self.lease_s

    def new_primary(self, index: int) -> None:
        """`index` has another primary: it holds no lease until it renews one."""
        self._granted.pop(index, None)

    def expires(self, index: int) -> float:
        """The time (this clock) after which the current primary of `index` answers nothing."""
        return max(self.started, self._granted.get(index, self.started)) \
            + self.lease_s + self.margin_s

    def left(self, index: int) -> float:
        """Seconds until then (0 when it has passed)."""
        return max(0.0, self.expires(index) - self.clock())
