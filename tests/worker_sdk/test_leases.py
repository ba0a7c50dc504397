"""LeaseTable and the ack ledger: pure bookkeeping, no master."""
from __future__ import annotations

import gc
import weakref

from worker_sdk import ack
from worker_sdk.data.leases import LeaseTable, Report, Result

OK = Result(0, True, False, "")
DUP = Result(0, False, True, "taken away")


def _table(*sizes):
    t = LeaseTable("d")
    leases = [t.add(i + 1, 0, i, i * 10, i * 10 + size) for i, size in enumerate(sizes)]
    return t, leases


def _read_deliver(t, n):
    got = [t.take() for _ in range(n)]
    t.deliver([lease for lease, _ in got])
    return got


def test_positions_are_read_in_lease_order_and_training_is_a_prefix():
    t, (a, b) = _table(3, 2)
    got = _read_deliver(t, 4)
    assert [(lease.lease_id, k) for lease, k in got] == [(1, 0), (1, 1), (1, 2), (2, 0)]
    assert t.in_flight() == 4 and t.reports() == []  # nothing trained: nothing to report
    t.mark_trained()
    assert (a.trained, b.trained) == (3, 1)
    assert t.reports() == [Report(1, "DONE", 3), Report(2, "PROGRESS", 1)]
    assert t.reports(every=True) == t.reports()
    t.close()


def test_a_mark_acknowledges_only_what_was_delivered_before_it():
    t, (a,) = _table(10)
    _read_deliver(t, 3)
    mark = ack.mark()
    _read_deliver(t, 4)  # fetched after the mark: its step has not finished
    assert ack.trained(mark) == 3
    assert (a.trained, a.delivered) == (3, 7)
    assert ack.trained() == 4 and a.trained == 7
    t.close()


def test_acks_fan_out_to_every_registered_table_in_delivery_order():
    t1, (a,) = _table(5)
    t2, (b,) = _table(5)
    _read_deliver(t1, 2)
    _read_deliver(t2, 1)
    mark = ack.mark()
    _read_deliver(t1, 1)
    assert ack.trained(mark) == 3
    assert (a.trained, b.trained) == (2, 1)
    t1.close()
    t2.close()
    assert ack.trained() == 0  # closed tables are no longer acknowledged


def test_a_table_collected_without_being_closed_is_no_longer_acknowledged():
    t1, (a,) = _table(5)
    t2, leases2 = _table(5)
    _read_deliver(t1, 2)
    _read_deliver(t2, 1)
    gone = weakref.ref(t2)
    del t2, leases2
    gc.collect()
    assert gone() is None
    assert ack.trained() == 2 and a.trained == 2  # the others still are
    t1.close()
    assert ack.trained() == 0


def test_a_ledger_of_its_own_and_an_abandoned_push_hands_leases_back_released():
    """A table registers with the ledger it is given (not the process's); a push that did
    not go through releases the leases in flight (RELEASED: no failure of the data), a failed
    training step fails them (FAILED)."""
    ledger = ack.AckLedger()
    t = LeaseTable("d", ledger)
    a = t.add(1, 0, 0, 0, 10)
    b = t.add(2, 0, 1, 10, 20)
    got = [t.take() for _ in range(12)]
    t.deliver([lease for lease, _ in got[:4]])
    ledger.trained(ledger.mark())
    assert ack.trained() == 0 and a.trained == 4  # the process's ledger knows nothing of t
    t.deliver([lease for lease, _ in got[4:]])
    assert ledger.abandon("refused as stale", released=True) == 2
    assert t.fail_in_flight("the loop gave up") == 0  # the first cause sticks
    assert t.reports() == [Report(1, "RELEASED", 4, "refused as stale"),
                           Report(2, "RELEASED", 0, "refused as stale")]
    assert b.trained == 0
    # a master that does not know RELEASED refuses it: the next report says FAILED
    t.apply(t.reports(), [Result(1, False, False, "outcome 'unknown(4)' is not one of ..."),
                          Result(2, True, False, "")])
    assert t.reports() == [Report(1, "FAILED", 4, "refused as stale")]
    t.close()
    failing = LeaseTable("e", ledger)
    failing.add(3, 0, 0, 0, 5)
    failing.deliver([failing.take()[0]])
    assert failing.fail_in_flight("nan loss") == 1
    assert failing.reports() == [Report(3, "FAILED", 0, "nan loss")]
    failing.close()


def test_answers_update_offsets_and_drop_leases_taken_away():
    t, (a, b, c) = _table(2, 4, 4)
    _read_deliver(t, 2 + 3)
    t.mark_trained()
    reports = t.reports(every=True)
    assert reports == [Report(1, "DONE", 2), Report(2, "PROGRESS", 3), Report(3, "PROGRESS", 0)]
    t.apply(reports, [OK, OK, DUP])
    assert list(t.leases) == [2] and b.reported == 3
    assert t.completed == 1 and t.duplicates == 1 and t.dropped == 1
    assert t.reports() == []  # PROGRESS 3 was accepted: nothing new
    assert t.take() == (b, 3)
    t.close()


def test_a_failed_step_fails_the_leases_in_flight_and_stops_reading_them():
    t, (a, b) = _table(4, 4)
    _read_deliver(t, 2)
    t.mark_trained()
    _read_deliver(t, 1)
    assert t.fail_in_flight("boom") == 1
    assert t.reports() == [Report(1, "FAILED", 2, "boom")]
    assert t.take()[0] is b  # nothing more is read from the failed lease
    t.mark_trained()
    assert a.trained == 2  # its in-flight record is never acknowledged
    t.close()


def test_a_frozen_table_acknowledges_nothing_more():
    t, (a,) = _table(4)
    _read_deliver(t, 2)
    t.freeze()
    assert ack.trained() == 0 and a.trained == 0
    t.close()


def test_rewind_returns_positions_read_but_not_delivered():
    t, (a,) = _table(4)
    _read_deliver(t, 1)
    t.take(), t.take()
    t.rewind()
    assert t.take() == (a, 1)
    t.close()
