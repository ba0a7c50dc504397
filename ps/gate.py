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
        # a class, not a generator context manager: every request takes it two to four times
        self._shared_hold = _Shared(self)

    def shared(self) -> "_Shared":
        """Hold the gate shared inside a `with` (nests within a thread)."""
        return self._shared_hold

    def held_here(self) -> bool:
        """Whether this thread holds the gate shared (it must not wait for `exclusive`)."""
        return bool(getattr(self._held, "depth", 0))

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


class _Shared:
    """`Gate.shared()`: one object per gate, the nesting depth kept per thread."""

    __slots__ = ("gate",)

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def __enter__(self) -> None:
        gate = self.gate
        depth = getattr(gate._held, "depth", 0)
        if depth:  # nested: never waits (a waiting writer waits for the outer hold)
            gate._held.depth = depth + 1
            return
        with gate._lock:
            while gate._exclusive or gate._waiting_exclusive:
                gate._cond.wait()
            gate._shared += 1
        gate._held.depth = 1

    def __exit__(self, *exc) -> None:
        gate = self.gate
        depth = gate._held.depth - 1
        gate._held.depth = depth
        if depth:
            return
        with gate._lock:
            gate._shared -= 1
            # only a writer waits for the shared holds to end (it counts itself waiting
            # under this lock first); shared waiters wait for a writer's end instead
            if gate._shared == 0 and gate._waiting_exclusive:
                gate._cond.notify_all()
