"""Log lines for what repeats: one line for a run of the same failure, not one per try.

A PS whose master is down fails a call every half second; a worker's calls wait for a dozen
slot hand-overs in one resize. A line per event buries the one that matters (issue 37), so
`Repeated` logs the first event of a run as it happens, then, while the run goes on, one line
every `every_s` seconds with how many there were, and when it ends (`ended`) one line with
the count. `one_line` says what a gRPC error was without its multi-line repr.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

SUMMARY_EVERY_S = 30.0


def one_line(exc: BaseException) -> str:
    """`CODE: details` of a gRPC error (its repr spans four lines), else the first line of
    `str(exc)`."""
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        try:
            name = getattr(code(), "name", code())
            return f"{name}: {details()}"
        except Exception:  # noqa: BLE001 - a stand-in without a status: its text below
            pass
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Repeated:
    """A run of the same event, logged as one line and a count.

    `event(message, key, level)`: one more; the first of a run is logged at `level` (the
    run's: the event's, else the constructor's), the ones after
    are counted and said every `every_s` seconds as one line ("... (N times in S s)"). A `key`
    other than the run's (another kind of failure) ends the run and starts a new one.
    `ended(message)`: the run is over (the call succeeded again): one line at `ended_level`
    saying how many there were, nothing when there was no run. Thread-safe."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 every_s: float = SUMMARY_EVERY_S, ended_level: int = logging.INFO,
                 clock: Callable[[], float] = time.monotonic):
        self.log = logger
        self.level = level
        self.ended_level = ended_level
        self.every_s = every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._key: object = None
        self.count = 0      # events in the current run
        self._since = 0.0   # when the run began
        self._said = 0.0    # when a line about it was last written
        self._unsaid = 0    # events since that line
        self._last = ""     # the latest event's message
        self._level = level  # the run's (its first event's)

    @property
    def running(self) -> bool:
        return self.count > 0

    def event(self, message: str, key: object = None, level: int | None = None) -> None:
        key = message if key is None else key
        with self._lock:
            now = self.clock()
            if self.count and key != self._key:
                self._summary(now, "")
                self._reset()
            self._last = message
            if not self.count:
                self._key, self._since, self._said = key, now, now
                self._level = self.level if level is None else level
                self.count = 1
                self.log.log(self._level, "%s", message)
                return
            self.count += 1
            self._unsaid += 1
            if now - self._said >= self.every_s:
                self._summary(now, " so far")

    def ended(self, message: str) -> None:
        if not self.count:  # the usual case, on every call: no lock taken
            return
        with self._lock:
            if not self.count:
                return
            span = self.clock() - self._since
            times = "once" if self.count == 1 else f"{self.count} times"
            self.log.log(self.ended_level, "%s (after %s in %.1f s: %s)", message, times, span,
                         self._last)
            self._reset()

    def _summary(self, now: float, so_far: str) -> None:
        if self._unsaid:
            self.log.log(self._level, "%s (%d times in %.1f s%s)", self._last, self.count,
                         now - self._since, so_far)
        self._said, self._unsaid = now, 0

    def _reset(self) -> None:
        self.count, self._unsaid, self._key, self._last = 0, 0, None, ""
