"""A PS primary's lease (fake clock): renewal counted from the send, expiry, revocation."""
from __future__ import annotations

from ps.replication.lease import PrimaryLease
from tests.fakes import FakeClock


def test_a_new_lease_is_not_valid_until_renewed():
    lease = PrimaryLease(FakeClock(10.0))
    assert not lease.valid() and lease.left() == 0.0 and lease.due(0.5)


def test_a_renewal_counts_from_when_it_was_sent_not_when_the_answer_came():
    clock = FakeClock(10.0)
    lease = PrimaryLease(clock)
    sent = lease.sending()
    clock.advance(1.5)  # a slow master: the answer comes 1.5 s later
    lease.renewed(sent, 2.0)
    assert lease.valid() and lease.left() == 0.5
    clock.advance(0.5)
    assert not lease.valid()


def test_an_older_renewal_answered_late_never_shortens_the_lease():
    clock = FakeClock(0.0)
    lease = PrimaryLease(clock)
    first = lease.sending()
    clock.advance(1.0)
    lease.renewed(lease.sending(), 2.0)  # until 3.0
    lease.renewed(first, 2.0)            # until 2.0: ignored
    assert lease.until == 3.0


def test_renewals_are_due_once_a_quarter_lease_went_by():
    clock = FakeClock(0.0)
    lease = PrimaryLease(clock)
    lease.renewed(lease.sending(), 2.0)
    assert not lease.due(0.5)
    clock.advance(0.5)
    assert lease.due(0.5)


def test_revoked_when_deposed():
    lease = PrimaryLease(FakeClock(0.0))
    lease.renewed(lease.sending(), 2.0)
    lease.revoke()
    assert not lease.valid()
    assert not lease.wait_valid(5.0, give_up=lambda: True)  # returns at once when told to
