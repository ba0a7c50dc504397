"""The registrar's decisions against a fake master: backoff, checks, registering again."""
from __future__ import annotations

import threading

import grpc

from protos import master_pb2
from tests.fakes import FakeError
from ps.registrar import Registrar
from rpckit.tls_check import TLSMismatch


class FakeMaster:
    def __init__(self):
        self.down = False
        self.refuse = None
        self.ps: dict[int, master_pb2.PSInfo] = {}
        self.calls: list[str] = []

    def RegisterPS(self, req, timeout=None):
        self.calls.append("register")
        if self.down:
            raise FakeError(grpc.StatusCode.UNAVAILABLE)
        if self.refuse:
            raise FakeError(self.refuse)
        old = self.ps.get(req.index)
        self.ps[req.index] = master_pb2.PSInfo(
            address=req.address, data_address=req.data_address, index=req.index,
            num_ps=req.num_ps, incarnation=(old.incarnation + 1) if old else 1)
        return master_pb2.RegisterPSResponse(incarnation=self.ps[req.index].incarnation)

    def ListPS(self, req, timeout=None):
        self.calls.append("list")
        if self.down:
            raise FakeError(grpc.StatusCode.UNAVAILABLE)
        return master_pb2.ListPSResponse(ps=list(self.ps.values()))


def _registrar(master):
    return Registrar(master, "h:1", "tcp://h:2", index=1, num_ps=2, interval=2.0,
                     first_backoff=0.1)


def test_backs_off_while_the_master_is_down_then_registers():
    master = FakeMaster()
    master.down = True
    r = _registrar(master)
    delays = [r.step() for _ in range(7)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]  # bounded exponential backoff
    master.down = False
    assert r.step() == 2.0 and r.registered and r.incarnation == 1


def test_checks_and_registers_again_when_the_master_forgot():
    master = FakeMaster()
    r = _registrar(master)
    r.step()
    assert r.step() == 2.0 and master.calls == ["register", "list"]
    master.ps.clear()  # the master's database was replaced
    assert r.step() == 0.0 and not r.registered
    r.step()
    assert master.ps[1].address == "h:1" and r.registrations == 2


def test_registers_again_when_listed_with_other_addresses():
    master = FakeMaster()
    r = _registrar(master)
    r.step()
    master.ps[1].data_address = "tcp://elsewhere:9"
    assert r.step() == 0.0
    r.step()
    assert master.ps[1].data_address == "tcp://h:2" and master.ps[1].incarnation == 2


def test_a_master_that_refuses_is_retried_at_the_interval():
    master = FakeMaster()
    master.refuse = grpc.StatusCode.FAILED_PRECONDITION
    r = _registrar(master)
    assert r.step() == 2.0 and not r.registered


def test_an_unreachable_master_while_registered_keeps_checking():
    master = FakeMaster()
    r = _registrar(master)
    r.step()
    master.down = True
    assert r.step() == 0.1 and r.registered
    master.down = False
    assert r.step() == 2.0


def test_a_refused_token_stops_the_registrar_at_once_naming_its_source():
    master = FakeMaster()
    master.refuse = grpc.StatusCode.UNAUTHENTICATED
    told: list[str] = []
    r = Registrar(master, "h:1", "tcp://h:2", index=1, num_ps=2, interval=2.0,
                  token_source="--auth-token-file /run/token", on_fatal=told.append)
    r.step()
    assert len(told) == 1 and "--auth-token-file /run/token" in told[0]
    stop = threading.Event()
    r.run(stop)  # returns at once: nothing is retried
    assert master.calls == ["register"] and not r.registered


def test_a_tls_mismatch_stops_the_registrar():
    class TLSMaster(FakeMaster):
        def RegisterPS(self, req, timeout=None):
            self.calls.append("register")
            raise TLSMismatch("the server at m:1 serves TLS and this client speaks plaintext: "
                              "give ... --tls-ca")

    told: list[str] = []
    r = Registrar(TLSMaster(), "h:1", "tcp://h:2", index=1, num_ps=2, on_fatal=told.append)
    r.step()
    assert told and "--tls-ca" in told[0] and r.fatal


def test_a_layout_mismatch_stops_the_registrar_with_the_masters_message():
    class StrayMaster(FakeMaster):
        def RegisterPS(self, req, timeout=None):
            self.calls.append("register")
            err = FakeError(grpc.StatusCode.FAILED_PRECONDITION)
            err.reason = "LAYOUT_MISMATCH"
            err.details = lambda: "PS index 2 is not part of the job: ... resize-ps 3 ..."
            raise err

    told: list[str] = []
    master = StrayMaster()
    r = Registrar(master, "h:1", "tcp://h:2", index=2, num_ps=3, on_fatal=told.append)
    r.step()
    assert len(told) == 1 and "resize-ps 3" in told[0] and r.fatal
    r.run(threading.Event())  # returns at once: never retried
    assert master.calls == ["register"] and not r.registered


def test_an_index_a_resize_adds_is_found_among_the_joining():
    class GrowingMaster(FakeMaster):
        def ListPS(self, req, timeout=None):
            self.calls.append("list")
            return master_pb2.ListPSResponse(joining=list(self.ps.values()))

    master = GrowingMaster()
    r = _registrar(master)
    r.step()
    assert r.step() == 2.0 and r.registered and master.calls == ["register", "list"]


def test_a_step_that_raises_a_bug_is_logged_and_tried_again(monkeypatch, caplog):
    """A dead registrar thread would leave a deposed primary unlisted for good: a step that
    raises what the registrar does not expect is logged, and the loop goes on."""
    monkeypatch.setattr("ps.registrar.BUG_RETRY_S", 0.05)
    master = FakeMaster()
    broken = [True]
    register = master.RegisterPS

    def flaky(req, timeout=None):
        if broken:
            broken.clear()
            raise KeyError("a bug")  # not an RPC error: nothing in step() expects it
        return register(req, timeout)

    master.RegisterPS = flaky
    r = _registrar(master)
    stop = threading.Event()
    thread = threading.Thread(target=r.run, args=(stop,), daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if r.registered:
                break
            threading.Event().wait(0.05)
        assert r.registered and master.ps[1].incarnation == 1
        assert thread.is_alive()
        assert "the registrar's step failed" in caplog.text
    finally:
        stop.set()
        r._wake.set()  # out of its wait at once
        thread.join(5)
    assert not thread.is_alive()


def test_the_master_down_is_one_warning_and_one_line_when_it_answers_again(caplog):
    """Registering, then checking, against a master that is down: one WARNING for each
    outage, not one per try, and one INFO line with the count when the master answers."""
    import logging

    master = FakeMaster()
    master.down = True
    r = _registrar(master)
    with caplog.at_level(logging.INFO, logger="ps.registrar"):
        for _ in range(10):
            r.step()
        master.down = False
        r.step()
        assert r.registered
        master.down = True  # down again while registered: the checks fail
        for _ in range(6):
            r.step()
        master.down = False
        r.step()
    lines = [(rec.levelno, rec.getMessage()) for rec in caplog.records
             if rec.name == "ps.registrar"]
    warnings = [m for level, m in lines if level >= logging.WARNING]
    assert len(warnings) == 2 and all("master unreachable (UNAVAILABLE)" in m for m in warnings)
    again = [m for level, m in lines if level == logging.INFO and "answers again" in m]
    assert len(again) == 2
    assert "after 10 times" in again[0] and "after 6 times" in again[1]
