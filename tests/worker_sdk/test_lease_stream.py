"""LeaseStream (the torch-free lease protocol) against the real master core, in process.

No network and no sleeps: tests/worker_sdk/local_master.py runs MasterServicer over MasterCore
and an in-memory store on a fake clock, with scripted faults.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

from protos import master_pb2 as pb
from worker_sdk.data.ack import AckLedger
from worker_sdk.data.lease_stream import END, LeaseStream, Piece, Wait
from tests.worker_sdk.local_master import LocalMaster

pytestmark = pytest.mark.timeout(30)


def _spec(name="d", n=100, size=10, epochs=1, shuffle=False, seed=0):
    return pb.DatasetSpec(name=name, num_records=n, shard_size=size, num_epochs=epochs,
                          shuffle=shuffle, seed=seed)


def _stream(master, spec=None, **kw):
    kw.setdefault("handle_sigterm", False)
    kw.setdefault("heartbeat", False)
    kw.setdefault("ack", "push")
    kw.setdefault("retry_timeout_s", 5.0)
    return LeaseStream(spec or _spec(), stub=master.stub(), **kw)


def _records(stream, piece) -> list[int]:
    index = stream.records(piece)
    if isinstance(index, slice):
        return list(range(index.start, index.stop))
    return index.tolist()


def drain(stream, limit=7, trained=None, until=None):
    """Read, deliver and acknowledge piece by piece until END (or `until` records)."""
    trained = [] if trained is None else trained
    while until is None or len(trained) < until:
        item = stream.next_piece(limit)
        if item is END:
            break
        if isinstance(item, Wait):
            raise AssertionError("a lone worker never waits")
        stream.deliver([item])
        trained += _records(stream, item)
        stream.mark_trained()
    return trained


def test_two_epochs_every_record_once_with_reports_carried_by_get_shard():
    master = LocalMaster()
    stream = _stream(master, _spec(epochs=2, shuffle=True, seed=3), max_shards=3)
    seen = drain(stream)
    assert collections.Counter(seen) == {i: 2 for i in range(100)}
    epochs = master.epochs("d")
    assert [e.records_done for e in epochs.values()] == [100, 100]
    assert all(e.handouts == 10 and e.duplicates == 0 for e in epochs.values())
    # 20 shards at three per call (a call spans the epoch boundary), then END; the reports
    # travel on those calls: no ReportShard at all
    assert master.calls["ReportShard"] == 0 and master.calls["GetShard"] == 7 + 1
    assert [e.cause for e in master.events("worker_left")] == ["finished"]
    stream.close()


def test_pieces_are_runs_of_one_lease_and_shuffle_is_a_permutation_of_the_shard():
    master = LocalMaster()
    stream = _stream(master, _spec(shuffle=True, seed=5), max_shards=1)
    piece = stream.next_piece(4)
    assert isinstance(piece, Piece) and (piece.first, piece.count) == (0, 4)
    rest = stream.next_piece(100)
    assert rest.lease is piece.lease and (rest.first, rest.count) == (4, 6)
    shard = piece.lease.index
    whole = _records(stream, piece) + _records(stream, rest)
    assert sorted(whole) == list(range(shard * 10, shard * 10 + 10))
    assert whole != sorted(whole)
    assert isinstance(stream.records(piece), np.ndarray)
    stream.close()


def test_nothing_is_reported_before_it_is_acknowledged_and_close_hands_back_the_offset():
    master = LocalMaster()
    stream = _stream(master, max_shards=1)
    first = stream.next_piece(3)
    stream.deliver([first])
    stream.client.heartbeat()
    assert master.epochs("d")[0].records_done == 0  # delivered, not trained
    stream.mark_trained()
    second = stream.next_piece(4)
    stream.deliver([second])  # in training when the worker closes: not acknowledged
    stream.close()
    epoch = master.epochs("d")[0]
    assert epoch.records_done == 3 and epoch.requeues["closed"] == 1
    again = _stream(master, worker_name="next")
    piece = again.next_piece(100)
    assert (piece.lease.start, piece.lease.end) == (3, 10)  # the exact remainder, first
    again.close()


def test_preemption_hands_back_the_trained_offset_and_counts_no_failure():
    master = LocalMaster()
    stream = _stream(master, max_shards=2)
    piece = stream.next_piece(6)
    stream.deliver([piece])
    stream.mark_trained()
    stream.deliver([stream.next_piece(2)])  # the step in flight at SIGTERM
    stream._preempt_freeze()
    stream.mark_trained()  # a push finishing after the freeze acknowledges nothing
    stream._preempt_leave()
    epoch = master.epochs("d")[0]
    assert epoch.records_done == 6 and epoch.requeues["preempted"] == 2
    assert [e.cause for e in master.events("worker_left")] == ["preempted"]
    rest = drain(_stream(master, worker_name="b"))
    assert sorted(rest) == list(range(6, 100))


def test_leases_granted_in_a_lost_answer_are_taken_up_not_left_idle():
    master = LocalMaster()
    stream = _stream(master, max_shards=2)
    master.lose_answer("GetShard")  # applied by the master, the answer never arrives
    seen = drain(stream)
    assert collections.Counter(seen) == {i: 1 for i in range(100)}
    epoch = master.epochs("d")[0]
    # the two leases of the lost answer were adopted, not handed out again after a timeout
    assert epoch.records_done == 100 and epoch.handouts == 10 and epoch.duplicates == 0
    stream.close()


def test_an_unreachable_master_is_retried_and_nothing_is_lost():
    master = LocalMaster()
    stream = _stream(master, max_shards=2)
    part = drain(stream, until=15)
    master.unreachable("GetShard", 2)
    rest = drain(stream)
    assert collections.Counter(part + rest) == {i: 1 for i in range(100)}
    assert master.epochs("d")[0].records_done == 100
    stream.close()


def test_a_worker_declared_lost_registers_again_and_its_leases_are_done_once():
    master = LocalMaster()
    stream = _stream(master, max_shards=2)
    part = drain(stream, until=5)  # holds the rest of shard 0 and all of shard 1
    master.advance(10.0)  # silent for longer than the worker timeout: lost
    rest = drain(stream)
    assert stream.client.registrations == 2 and stream.table.dropped == 2
    epoch = master.epochs("d")[0]
    assert epoch.records_done == 100 and epoch.requeues["lost"] == 2
    # nothing of the two leases was reported (no call carried it) and the worker trained them
    # to the end before a call told it it was lost: the master counts each record once, when
    # it is trained again, and shows the 20 records of the leases that came back whole
    assert part == list(range(7)) and epoch.records_redone == 20
    assert collections.Counter(part + rest) == {i: 2 if i < 20 else 1 for i in range(100)}
    stream.close()


def test_a_replaced_master_database_gets_the_dataset_created_again():
    master = LocalMaster()
    stream = _stream(master, max_shards=1)
    drain(stream, until=3)
    master.replace_database()  # forgets the worker and the dataset
    seen = drain(stream)
    assert sorted(seen[-100:]) == list(range(100))  # the new master starts the job over
    assert master.epochs("d")[0].records_done == 100
    assert stream.client.registrations == 2
    stream.close()


def test_a_restarted_master_keeps_the_worker_and_its_leases():
    master = LocalMaster()
    stream = _stream(master, max_shards=2)
    part = drain(stream, until=5)
    master.restart()
    rest = drain(stream)
    assert collections.Counter(part + rest) == {i: 1 for i in range(100)}
    assert stream.client.registrations == 1
    epoch = master.epochs("d")[0]
    assert epoch.records_done == 100 and epoch.handouts == 10
    stream.close()


def test_a_failed_step_reports_failed_and_the_shard_is_quarantined():
    master = LocalMaster()
    stream = _stream(master, _spec(n=30), max_shards=1)
    trained = []
    while True:
        item = stream.next_piece(100)
        if item is END:
            break
        stream.deliver([item])
        if item.lease.index == 1:
            stream.mark_failed("poison")
            continue
        trained += _records(stream, item)
        stream.mark_trained()
    epoch = master.epochs("d")[0]
    assert epoch.quarantined == 1 and epoch.records_done == 20
    assert sorted(trained) == list(range(10)) + list(range(20, 30))
    stream.close()


def test_joining_an_existing_dataset_by_name():
    master = LocalMaster()
    _stream(master, _spec(n=20)).close()  # someone created it
    stream = _stream(master, "d")
    assert stream.layout is None
    n = 0
    while (item := stream.next_piece(100)) is not END:
        stream.deliver([item])
        stream.mark_trained()
        n += item.count
    assert n == 20 and master.epochs("d")[0].records_done == 20
    stream.close()


def test_leasing_ahead_asks_in_the_background_before_the_reader_runs_dry():
    import threading

    master = LocalMaster()
    stream = _stream(master, _spec(epochs=2, shuffle=True, seed=4), max_shards=1,
                     lease_ahead=True)
    callers = []
    real = stream.client.get_shard

    def get_shard(*args, **kw):
        callers.append(threading.current_thread().name)
        return real(*args, **kw)

    stream.client.get_shard = get_shard
    seen = drain(stream, limit=3)
    assert collections.Counter(seen) == {i: 2 for i in range(100)}  # every record, once
    # the reader asked for the first lease (and the END) itself; every other grant was asked
    # ahead, while half a shard was still unread
    ahead = [c for c in callers if c == "elastic-ps-lease-ahead"]
    assert len(ahead) >= 19 and callers.count(threading.current_thread().name) <= 2, callers
    assert all(e.records_done == 100 and e.duplicates == 0 for e in master.epochs("d").values())
    stream.close()


def test_a_lease_asked_ahead_when_nothing_is_left_leaves_the_end_to_the_reader():
    master = LocalMaster()
    stream = _stream(master, _spec(n=20, size=10), max_shards=1, lease_ahead=True)
    seen = drain(stream, limit=4)
    assert sorted(seen) == list(range(20)) and stream.ended
    assert master.epochs("d")[0].records_done == 20
    stream.close()


class _Pusher:
    """A PSClient's part in the ack rule: its flush answers the push in flight, which
    acknowledges the records it carried."""

    def __init__(self, ledger: AckLedger):
        self.ledger, self.mark = ledger, None

    def flush(self, timeout_s=None):
        if self.mark is not None:
            self.ledger.trained(self.mark)
            self.mark = None


def test_the_jobs_tail_ends_at_once_when_the_flush_acknowledges_what_the_master_waits_for(
        monkeypatch):
    """The master answers WAIT while the loop's last records are unacknowledged; the tail's
    flush acknowledges them, and the next GetShard (carrying their reports) follows at once
    instead of after the master's retry hint. A WAIT with nothing newly acknowledged sleeps."""
    master = LocalMaster()
    ledger = AckLedger()
    pusher = _Pusher(ledger)
    ledger.register_flusher(pusher)
    stream = _stream(master, _spec(n=10, size=10), ledger=ledger)
    piece = stream.next_piece(10)
    stream.deliver([piece])
    pusher.mark = ledger.mark()  # the last step's push, not answered yet
    item = stream.next_piece(10)
    assert isinstance(item, Wait) and item.seconds > 0
    slept = []
    monkeypatch.setattr(stream.cancel, "wait", slept.append)
    assert not stream.at_tail()  # the flush acknowledged the records: the pass goes on
    stream.wait(item)
    assert slept == []
    assert stream.next_piece(10) is END
    assert master.epochs("d")[0].records_done == 10
    stream.wait(item)  # nothing acknowledged since: the hint is slept
    assert slept == [item.seconds]
    stream.close()
