"""Bounded exponential backoff, with a fake clock."""
from __future__ import annotations

from tests.fakes import FakeClock
from rpckit.retry import Backoff, RetryPolicy


def test_backoff_doubles_up_to_the_cap_and_stops_at_the_budget():
    clock = FakeClock()
    backoff = Backoff(RetryPolicy(initial_s=0.1, max_s=2.0, total_s=10.0), clock=clock)
    delays = []
    while (delay := backoff.next_delay()) is not None:
        delays.append(delay)
        clock.advance(delay)
    assert delays[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert all(d <= 2.0 for d in delays)
    assert abs(sum(delays) - 10.0) < 1e-6  # the last wait is cut to the budget
    assert backoff.attempts == len(delays) + 1


def test_a_zero_budget_means_a_single_attempt():
    assert Backoff(RetryPolicy(total_s=0.0), clock=FakeClock()).next_delay() is None
