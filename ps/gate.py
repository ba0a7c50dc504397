"""Gate: a shared/exclusive lock that lets a checkpoint see no half-applied mutation.

Every mutation (Push, PushRows, InitParameters) holds the gate shared for its whole length;
a checkpoint snapshot holds it exclusive for as long as it takes to copy the state. Waiting
writers (the snapshot) go first, so a stream of pushes cannot starve a checkpoint. Pulls do
not take the gate (they only take per-tensor locks), except a bounded table's row pulls,
which change the table (admission, evictions, the touch order) and hold it shared.

Shared holds nest within a thread: the data plane holds the gate shared for a whole request
(its slots' ownership is checked once and cannot change under it, ps/ownership.py) and the
store's calls inside take it again. A nested hold never waits for a waiting writer (that
writer waits for the outer hold: it would never come).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class Gate:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self._held = threading.local()

    @contextmanager
    def shared(self):
        depth = getattr(self._held, "depth", 0)
        if depth:
            self._held.depth = depth + 1
            try:
                yield
            finally:
                self._held.depth = depth
            return
        with self._cond:
            while self._exclusive or self._waiting_exclusive:
                self._cond.wait()
            self._shared += 1
        self._held.depth = 1
        try:
            yield
        finally:
            self._held.depth = 0
            with self._cond:
                self._shared -= 1
                if self._shared == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting_exclusive += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting_exclusive -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
