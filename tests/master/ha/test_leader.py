"""The leader lease's decisions, on a fake clock."""
from __future__ import annotations

from master.ha.leader import Action, LeaderLease, LeaseRow, Leadership

LEASE = 5.0


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def lease(address="b:2", clock=None):
    return LeaderLease("me", address, LEASE, clock or Clock())


HELD = LeaseRow("other", "a:1", term=3, version=7)


def test_a_free_row_is_taken_at_once():
    assert lease().observe(LeaseRow("", "", 0, 0)) is Action.ACQUIRE


def test_a_row_left_by_a_process_on_our_own_address_is_taken_at_once():
    # we bound that port, so the process that held the row there is gone
    assert lease(address="a:1").observe(HELD) is Action.ACQUIRE


def test_a_held_row_is_taken_only_after_a_whole_lease_without_change():
    clock = Clock()
    l = lease(clock=clock)
    assert l.observe(HELD) is Action.WAIT
    clock.now += LEASE - 0.01
    assert l.observe(HELD) is Action.WAIT
    clock.now += 0.01
    assert l.observe(HELD) is Action.ACQUIRE


def test_a_renewal_seen_restarts_the_standbys_wait():
    clock = Clock()
    l = lease(clock=clock)
    l.observe(HELD)
    clock.now += LEASE - 1
    renewed = LeaseRow("other", "a:1", term=3, version=8)
    assert l.observe(renewed) is Action.WAIT
    clock.now += LEASE - 0.5
    assert l.observe(renewed) is Action.WAIT  # measured from the change, not the first look
    clock.now += 0.5
    assert l.observe(renewed) is Action.ACQUIRE


def test_a_leader_renews_every_third_of_the_lease_and_serves_until_it_runs_out():
    clock = Clock()
    l = lease(clock=clock)
    l.acquired(term=4, started=clock.now)
    assert l.role is Leadership.LEADER and l.term == 4 and l.serving
    assert l.due() is Action.WAIT
    clock.now += LEASE / 3
    assert l.due() is Action.RENEW
    # renewals keep failing (database unreachable): it serves until the lease runs out ...
    clock.now += LEASE * 2 / 3 - 0.01
    assert l.serving and l.due() is Action.RENEW
    clock.now += 0.01
    # ... and then steps down: a standby may take over now
    assert not l.serving and l.due() is Action.STEP_DOWN


def test_the_lease_counts_from_the_start_of_the_renewal_that_succeeded():
    clock = Clock()
    l = lease(clock=clock)
    l.acquired(term=1, started=clock.now)
    clock.now += 2
    started = clock.now
    clock.now += 1.5  # the renewal took 1.5 s to commit
    l.renewed(started)
    clock.now = started + LEASE
    assert not l.serving  # not 1.5 s longer than a standby would wait


def test_a_lost_lease_stops_serving_for_good():
    clock = Clock()
    l = lease(clock=clock)
    l.acquired(term=1, started=clock.now)
    l.lost()
    assert l.role is Leadership.STOPPED and not l.serving


def test_polls_are_frequent_for_a_standby_and_timed_to_renewals_for_a_leader():
    clock = Clock()
    l = lease(clock=clock)
    assert l.next_poll() <= 0.1
    l.acquired(term=1, started=clock.now)
    assert abs(l.next_poll() - LEASE / 3) < 1e-9
