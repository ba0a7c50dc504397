"""Bounded exponential backoff for calls to a service that may be briefly unreachable.

`Backoff` decides (how long to wait next, whether the budget is spent) and owns no I/O, so it
is testable with a fake clock; callers do the sleeping, through an `Event` so that shutting
down interrupts a wait at once. The master client uses it for every call; the PS client can
use it the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

# Codes that mean "the server was not reached or did not answer in time": worth retrying.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


@dataclass
class RetryPolicy:
    """initial_s doubling up to max_s between attempts; give up after total_s in all."""

    initial_s: float = 0.1
    max_s: float = 2.0
    total_s: float = 120.0
    call_timeout_s: float = 5.0  # deadline of one attempt


@dataclass
class Backoff:
    policy: RetryPolicy
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    attempts: int = field(init=False, default=0)
    _delay: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self._delay = self.policy.initial_s

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when the budget is spent."""
        self.attempts += 1
        left = self.policy.total_s - self.elapsed
        if left <= 0:
            return None
        delay = min(self._delay, left)
        self._delay = min(self._delay * 2, self.policy.max_s)
        return delay
