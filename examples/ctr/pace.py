"""How fast the demo's workers train: a small JSON file the demo writes and each worker reads
between steps (`examples.ctr.train --pace-file PATH`).

    {"interval_s": 0.5, "hold": false}

`interval_s`: the least time from the start of one step to the start of the next, so that the
job's records last as long as the demo's schedule needs (its steps take wall time: a PS
starting, a standby taking over) instead of being trained before the first step fires.
`hold`: wait before the next step until it is false again (the demo holds training at a step's
fraction of the records until that step could fire). A held worker first has its pushes
answered, so what it trained is counted, and keeps its leases and heartbeats; SIGTERM still
ends it the usual way. A missing or unreadable file means full speed.

The file is replaced whole (written aside, then renamed), so a reader never sees half of it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

POLL_S = 0.05  # how soon a worker sees a hold lifted or a new interval


def write(path: str | Path, interval_s: float, hold: bool) -> None:
    path = Path(path)
    aside = path.with_name(path.name + ".new")
    aside.write_text(json.dumps({"interval_s": round(interval_s, 4), "hold": hold}))
    os.replace(aside, path)


class Pace:
    """The worker's side: `wait(flush)` between two training steps."""

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.path = Path(path)
        self.clock, self.sleep = clock, sleep
        self.interval_s, self.hold = 0.0, False
        self._stamp: int | None = None
        self._last: float | None = None  # when the last step started

    def read(self) -> None:
        """Read the file again if it changed since the last read."""
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            self.interval_s, self.hold, self._stamp = 0.0, False, None
            return
        if stamp == self._stamp:
            return
        try:
            doc = json.loads(self.path.read_text())
            self.interval_s = max(0.0, float(doc.get("interval_s", 0.0)))
            self.hold = bool(doc.get("hold", False))
            self._stamp = stamp
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # replaced while read: the next look reads the new one

    def wait(self, flush: Callable[[], None]) -> float:
        """Return when the next step may start; `flush` is called once before a hold (it
        should have every push answered). Returns the seconds waited."""
        began = now = self.clock()
        last = self._last if self._last is not None else began
        flushed = False
        while True:
            self.read()
            if self.hold:
                if not flushed:
                    flush()
                    flushed = True
                self.sleep(POLL_S)
                now = self.clock()
                continue
            due = last + self.interval_s
            if now >= due:
                break
            self.sleep(min(POLL_S * 4, due - now))
            now = self.clock()
        self._last = now
        return now - began
