"""What an engine that runs a job's processes itself (local, Ray) keeps of them: the processes
by the handle's id, the events not yet read, and `stop_all`, the one way to end them all.

The loop is the same for every such engine: stop each process (SIGTERM with the engine's
grace, or SIGKILL), poll until none is left, and once `timeout` passed call the engine's
`_overdue` every round, its last resort for what still runs (local: SIGKILL again; Ray: also
drop the actors that no longer answer). Kubernetes has no such loop: its pods go with their
owner.
"""
from __future__ import annotations

import collections
import signal
import threading
import time
from typing import Callable

from .port import EngineEvent, EventKind, Handle

STOP_POLL_S = 0.05


class Owner:
    """Base of LocalEngine and RayEngine: `_procs` (handle id -> the engine's record, which
    has `.handle`, `.deadline` and `.killed`), `_events`, `_lock`, `clock`, `stop_grace_s`.
    Subclasses give `_signal` (how a signal reaches a process's group), `poll` and
    `_overdue`."""

    clock: Callable[[], float]
    stop_grace_s: float

    def __init__(self) -> None:
        self._procs: dict = {}
        self._events: collections.deque[EngineEvent] = collections.deque()
        self._lock = threading.RLock()

    def stop(self, handle: Handle, graceful: bool = True) -> None:
        """SIGTERM (then SIGKILL after `stop_grace_s`) or SIGKILL now; an exit event follows."""
        with self._lock:
            proc = self._procs.get(handle.id)
            if proc is None:
                return
            if graceful:
                self._signal(proc, signal.SIGTERM)
                due = self.clock() + self.stop_grace_s
                proc.deadline = due if proc.deadline is None else min(proc.deadline, due)
            else:
                self._kill(proc)

    def _kill(self, proc) -> None:
        proc.killed = True
        self._signal(proc, signal.SIGKILL)

    def _signal(self, proc, sig: int) -> None:
        raise NotImplementedError

    def poll(self) -> list[EngineEvent]:
        raise NotImplementedError

    def _overdue(self, late_s: float, timeout: float) -> None:
        """Called holding the lock every round of `stop_all` once its `timeout` passed,
        `late_s` seconds after it, while processes are left."""
        raise NotImplementedError

    def running(self) -> list[Handle]:
        with self._lock:
            return [p.handle for p in self._procs.values()]

    def events(self) -> list[EngineEvent]:
        """The events since the last call, oldest first."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out

    def _emit(self, kind: EventKind, handle: Handle, *, code: int | None = None,
              deadline_ms: int | None = None, detail: str = "") -> None:
        self._events.append(EngineEvent(kind, handle, int(self.clock() * 1000), code,
                                        deadline_ms, detail))

    def stop_all(self, graceful: bool = True, timeout: float = 60.0) -> list[EngineEvent]:
        """Stop every process and wait until all ended (SIGKILL after the grace, or at
        `timeout`). The events of their ends (also queued)."""
        with self._lock:
            handles = self.running()
            before = len(self._events)
        for handle in handles:
            self.stop(handle, graceful)
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            with self._lock:
                if not self._procs:
                    return list(self._events)[before:]
                late = time.monotonic() - deadline
                if late > 0:
                    self._overdue(late, timeout)
            time.sleep(STOP_POLL_S)
