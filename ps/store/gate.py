"""Gate: a shared/exclusive lock that lets a checkpoint see no half-applied mutation.

Every mutation (Push, PushRows, InitParameters) holds the gate shared for its whole length;
a checkpoint snapshot holds it exclusive for as long as it takes to copy the state. Waiting
writers (the snapshot) go first, so a stream of pushes cannot starve a checkpoint. Pulls do
not take the gate (they only take per-tensor locks), except a bounded table's row pulls,
which change the table (admission, evictions, the touch order) and hold it shared.

Shared holds nest within a thread: the data plane holds the gate shared for a whole request
(its slots' ownership is checked once and cannot change under it, ps/slots/ownership.py) and the
store's calls inside take it again. A nested hold never waits for a waiting writer (that
writer waits for the outer hold: it would never come).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class Gate:
    def __init__(self) -> None:
        # held directly by the shared path (a C context manager; the Condition's own
        # __enter__ is Python code), as the condition's lock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0
        self._held = threading.local()

    def shared(self) -> "Gate":
        """Hold the gate shared inside a `with` (nests within a thread). The gate is its own
        shared context manager, not a generator one: every request takes it two to four
        times."""
        return self

    def held_here(self) -> bool:
        """Whether this thread holds the gate shared (it must not wait for `exclusive`)."""
        return bool(getattr(self._held, "depth", 0))

    def __enter__(self) -> None:
        depth = getattr(self._held, "depth", 0)
        if depth:  # nested: never waits (a waiting writer waits for the outer hold)
            self._held.depth = depth + 1
            return
        with self._lock:
            while self._exclusive or self._waiting_exclusive:
                self._cond.wait()
            self._shared += 1
        self._held.depth = 1

    def __exit__(self, *exc) -> None:
        depth = self._held.depth - 1
        self._held.depth = depth
        if depth:
            return
        with self._lock:
            self._shared -= 1
            # only a writer waits for the shared holds to end (it counts itself waiting
            # under this lock first); shared waiters wait for a writer's end instead
            if self._shared == 0 and self._waiting_exclusive:
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
