"""The primary's data path under its lease (ps/replication.Primary, no backups, fake clock):
refused before anything is applied without a lease, renewed from the send time of a report,
and checked again just before the answer leaves; and the replication threads that start as a
stopping PS terminates its ZeroMQ context end quietly."""
from __future__ import annotations

import threading

import pytest
import zmq

from protos import ps_pb2
from ps.store.params import ParamStore
from ps.replication.primary import Fenced, Primary
from rpckit.errors import ServiceError
from tests.fakes import FakeClock


class Master:
    """A fake master's ReportReplicas: grants `lease_s` when open, else fails or fences."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.lease_s = 0.0
        self.fenced = False
        self.delay = 0.0  # fake seconds the answer takes
        self.calls = threading.Event()

    def __call__(self, in_sync: list[str]) -> float:
        self.calls.set()
        self.clock.advance(self.delay)
        if self.fenced:
            raise Fenced("generation 2 exists")
        if not self.lease_s:
            raise ConnectionError("master unreachable")
        return self.lease_s


@pytest.fixture
def setup():
    clock = FakeClock(100.0)
    master = Master(clock)
    primary = Primary(ParamStore(), zmq.Context.instance(), "", 1, master, clock=clock)
    yield clock, master, primary
    primary.close()


def push() -> ps_pb2.DataRequest:
    return ps_pb2.DataRequest(client_id="c", seq=1, push=ps_pb2.Push())


def answer() -> list:
    return [ps_pb2.DataResponse(code=0, push=ps_pb2.PushResult()).SerializeToString()]


def test_without_a_lease_nothing_is_applied(setup, monkeypatch):
    clock, master, primary = setup
    monkeypatch.setattr("ps.replication.primary.LEASE_WAIT_S", 0.2)
    applied = []
    with pytest.raises(ServiceError) as err:
        primary.mutate(push(), b"", [], lambda: applied.append(1) or answer())
    assert (err.value.code, err.value.reason) == ("UNAVAILABLE", "FENCED")
    assert applied == []


def test_a_renewal_counts_from_its_send_and_a_lapse_during_the_push_refuses_the_answer(setup):
    clock, master, primary = setup
    master.lease_s, master.delay = 2.0, 0.5  # the answer comes 0.5 s after the send
    assert primary.lease.wait_valid(5.0)
    master.lease_s = 0.0  # no more renewals: the master is gone
    assert primary.lease.until <= clock() + 1.5  # from the send, not the answer
    assert primary.mutate(push(), b"", [], answer) == answer()

    def slow_apply():  # the lease runs out while the push is applied
        clock.advance(2.0)
        return answer()

    with pytest.raises(ServiceError) as err:
        primary.mutate(push(), b"", [], slow_apply)
    assert err.value.reason == "FENCED" and "retry it with its seq" in err.value.message


def test_a_master_that_says_fenced_revokes_the_lease(setup):
    clock, master, primary = setup
    master.lease_s = 2.0
    assert primary.lease.wait_valid(5.0)
    master.fenced = True
    master.calls.clear()
    clock.advance(1.0)  # a renewal is due (every quarter lease)
    assert master.calls.wait(5.0)
    with pytest.raises(ServiceError) as err:
        primary.mutate(push(), b"", [], answer)
    assert err.value.reason == "FENCED" and not primary.lease.valid() and primary.fenced


def test_without_backups_the_watch_wakes_for_renewals_only():
    """The watch used to look every 50 ms whether or not a backup was attached; without one it
    now sleeps until the next renewal (a quarter lease): a 2 s lease is renewed about every
    0.5 s, and over 1.5 s the watch takes a handful of rounds, not 30."""
    import time

    master = Master(FakeClock(0.0))
    master.lease_s = 2.0
    rounds = []

    class Counted(Primary):
        def _idle(self, renewed):
            rounds.append(time.monotonic())
            return super()._idle(renewed)

    primary = Counted(ParamStore(), zmq.Context.instance(), "", 1, master)  # the real clock
    try:
        assert primary.lease.wait_valid(5.0)
        time.sleep(1.5)
    finally:
        primary.close()
    assert 2 <= len(rounds) <= 8
    assert primary.lease.duration == 2.0


def test_a_backups_sender_started_as_the_context_closes_ends_quietly():
    """A backup attached right before the PS stops: its I/O thread may first run after the
    shared context was terminated. It must end without an exception (a dead thread's
    traceback) and leave no socket open behind."""
    from ps.replication.primary import AttachedBackup

    ctx = zmq.Context()
    backup = AttachedBackup(ctx, 1, "i" * 16, "tcp://127.0.0.1:9", "", 0, lambda: None)
    backup.close()
    ctx.term()  # returns: every socket the thread opened was closed
    backup._io(ctx, "")  # what the thread runs when it starts late: raises nothing


def test_a_backup_following_as_the_context_closes_ends_quietly():
    """The backup's side of the same race: its follower loop meets a context the stopping PS
    terminated, and ends without a dead thread's traceback."""
    from ps.replication.backup import Backup, Upstream

    ctx = zmq.Context()
    ctx.term()
    backup = Backup(ParamStore(), ctx, "", "i" * 16, "", "", apply=lambda req, frames: [])
    backup.upstream = Upstream(1, "tcp://127.0.0.1:9")
    backup._run()  # raises nothing
    assert backup.attach_id == 0 and backup._sock is None


def test_renewals_failing_while_the_master_is_down_are_one_line_and_a_count(setup, caplog):
    """Every quarter lease a renewal fails while the master is down: the first failure is one
    WARNING line (no multi-line gRPC repr), the rest are counted, and the renewal that works
    again says how many there were, at INFO."""
    import logging

    clock, master, primary = setup
    with caplog.at_level(logging.INFO, logger="ps.replication.primary"):
        for _ in range(12):
            primary._confirm(None)
            clock.advance(0.5)
        master.lease_s = 2.0
        primary._confirm(None)
    lines = [r for r in caplog.records if r.name == "ps.replication.primary"]
    warnings = [r for r in lines if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in lines]
    assert "cannot renew the primary lease" in warnings[0].getMessage()
    assert "master unreachable" in warnings[0].getMessage()
    assert all("\n" not in r.getMessage() for r in lines)
    again = [r.getMessage() for r in lines if "renews the primary lease again" in r.getMessage()]
    assert len(again) == 1 and lines[-1].levelno == logging.INFO
    count = int(again[0].split("(after ")[1].split(" times")[0])
    assert count >= 12  # the watch thread may have failed a renewal of its own meanwhile
