"""One retry policy for every client: bounded exponential backoff over one set of codes.

`Backoff` decides (how long to wait next, whether the budget is spent) and owns no I/O, so it
is testable with a fake clock; callers do the sleeping, through an `Event` so that shutting
down interrupts a wait at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

# "The server was not reached or did not answer in time": the only codes worth retrying.
# Every other code is an answer, and asking again would get the same one.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# A refusal of this process's credentials (its token, its rights): the same credentials get the
# same answer, so no client ever retries these, however long its budget; each raises at once
# with where its token came from (rpckit.auth.credentials_refused).
NEVER_RETRIED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
NEVER_RETRIED_NAMES = frozenset(code.name for code in NEVER_RETRIED)  # the data plane's codes


def retryable(exc: BaseException) -> bool:
    """Whether a failed gRPC call is worth another attempt."""
    code = exc.code() if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") else None
    return code in RETRYABLE


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
