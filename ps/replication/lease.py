"""A PS primary's lease: how long it may still answer mutations without hearing the master.

With replicas, the master may make another process the primary of this index while this one
is alive but unreachable (paused, partitioned). A primary that went on answering pushes then
would acknowledge pushes the new primary never sees. So a primary answers a mutation only
while it holds a lease, renewed by each successful `ReportReplicas` (ps/replication/primary.py renews
every quarter lease). The lease runs from the moment the renewal was SENT, on this process's
monotonic clock: the master answered after that, so the master's record of the grant
(master/ps/leases.py) is later than this, and the master waits the lease plus a margin after
it before a backup that is not in sync (or a new process) takes over.

Plain Python with an injected clock; the replication code carries it out.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class PrimaryLease:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.until = float("-inf")  # nothing granted yet: a new primary renews first
        self.duration = 0.0         # the master's last word on the lease's length
        self._cond = threading.Condition()

    def sending(self) -> float:
        """Call just before sending a renewal: the time the lease will count from."""
        return self.clock()

    def renewed(self, sent_at: float, duration_s: float) -> None:
        """The master granted `duration_s` to a renewal sent at `sent_at`."""
        with self._cond:
            self.duration = duration_s
            self.until = max(self.until, sent_at + duration_s)
            self._cond.notify_all()

    def revoke(self) -> None:
        """Deposed: nothing more is answered."""
        with self._cond:
            self.until = float("-inf")
            self._cond.notify_all()

    def valid(self) -> bool:
        return self.clock() < self.until

    def left(self) -> float:
        return max(0.0, self.until - self.clock())

    def due(self, every_s: float) -> bool:
        """Whether a renewal is due: less than `duration - every_s` left (or none held)."""
        return self.left() <= max(0.0, self.duration - every_s)

    def wait_valid(self, timeout: float, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Wait up to `timeout` seconds (real time) for a valid lease, or until `give_up()`;
        whether it is valid."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.valid():
                left = deadline - time.monotonic()
                if left <= 0 or give_up():
                    return False
                self._cond.wait(min(left, 0.05))
            return True
