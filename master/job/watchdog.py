"""A master's watch on the `elastic-job run` that started it (`--job-owner`, on this machine).

That command stops the job's masters once the job ended, and what the job launched when no
master is left. Killed itself (SIGKILL: it runs no handler), it can do neither, so the masters
do: once its process is gone (its pid and start time together, so a reused pid is not taken
for it), the leader stops the job as Ctrl-C would (`request_stop`: workers hand their leases
back exactly, then the PS), and every master exits once the job's durable state says it ended
(`finished` or `stopped`): the leader after its wind-down, a standby when it reads that (one
that takes over meanwhile continues the wind-down first).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from engines import process

log = logging.getLogger(__name__)
WATCH_S = 1.0
ENDED = ("finished", "stopped")


class OwnerWatch:
    """`owner`: "PID:START_TICKS"; `store`: the master's (its `job()` row says the state);
    `driver()`: this master's job driver while it leads (None: a standby); `stop`: set to make
    the master exit."""

    def __init__(self, owner: str, store, driver: Callable[[], object | None],
                 stop: threading.Event, *, alive: Callable[[str], bool] = process.alive,
                 period_s: float = WATCH_S):
        self.owner, self.store, self.driver, self.stop = owner, store, driver, stop
        self.alive, self.period_s = alive, period_s
        self.gone = False
        self._asked = None  # the driver asked to stop the job (one per term led)

    def start(self) -> "OwnerWatch":
        threading.Thread(target=self._run, name="owner-watch", daemon=True).start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            try:
                if self.check():
                    log.warning("the job has ended and elastic-job (%s) is gone: exiting",
                                self.owner)
                    self.stop.set()
                    return
            except Exception:  # noqa: BLE001 - the database is briefly away: next round
                log.exception("owner watch: a round failed")

    def check(self) -> bool:
        """One round: True when the owner is gone and the job has ended (the master exits)."""
        if self.alive(self.owner):
            return False
        if not self.gone:
            self.gone = True
            log.warning("elastic-job (%s) that started this master is gone: the job is "
                        "stopped as Ctrl-C would", self.owner)
        driver = self.driver()
        if driver is not None and driver is not self._asked:
            driver.request_stop("owner-gone")
            self._asked = driver
        row, _ = self.store.job()
        return row is not None and row["state"] in ENDED
