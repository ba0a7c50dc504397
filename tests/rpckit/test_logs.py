"""rpckit.logs: a run of the same event is one line and a count, not a line per event."""
from __future__ import annotations

import logging

import grpc

from rpckit.logs import Repeated, one_line
from tests.fakes import FakeClock

log = logging.getLogger("tests.rpckit.logs")


def _lines(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name]


def test_a_run_is_its_first_line_then_a_count_when_it_ends(caplog):
    clock = FakeClock()
    r = Repeated(log, every_s=30.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        r.ended("fine again")  # no run: nothing to say
        for _ in range(20):
            r.event("master unreachable: refused")
            clock.advance(0.5)
        r.ended("the master answers again")
        r.ended("the master answers again")  # said once
    lines = _lines(caplog)
    assert lines == [
        (logging.WARNING, "master unreachable: refused"),
        (logging.INFO, "the master answers again (after 20 times in 10.0 s: master "
                       "unreachable: refused)"),
    ]


def test_a_long_run_is_summed_up_every_period(caplog):
    clock = FakeClock()
    r = Repeated(log, every_s=30.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        for _ in range(130):  # 65 s of an event every 0.5 s
            r.event("down")
            clock.advance(0.5)
    lines = _lines(caplog)
    assert [m for _, m in lines] == ["down", "down (61 times in 30.0 s so far)",
                                     "down (121 times in 60.0 s so far)"]
    assert {lvl for lvl, _ in lines} == {logging.WARNING}
    assert r.count == 130


def test_another_kind_of_event_ends_the_run_and_starts_its_own(caplog):
    clock = FakeClock()
    r = Repeated(log, clock=clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        r.event("hand-over 1", key="moving", level=logging.INFO)
        r.event("hand-over 2", key="moving", level=logging.INFO)
        r.event("timeout", key="silent", level=logging.WARNING)
        r.event("timeout again", key="silent", level=logging.WARNING)
        clock.advance(1.0)
        r.ended("ok")
    assert _lines(caplog) == [
        (logging.INFO, "hand-over 1"),
        (logging.INFO, "hand-over 2 (2 times in 0.0 s)"),
        (logging.WARNING, "timeout"),
        (logging.INFO, "ok (after 2 times in 1.0 s: timeout again)"),
    ]


def test_one_event_then_the_end_says_once(caplog):
    r = Repeated(log, clock=FakeClock())
    with caplog.at_level(logging.INFO, logger=log.name):
        r.event("blip")
        r.ended("ok")
    assert [m for _, m in _lines(caplog)] == ["blip", "ok (after once in 0.0 s: blip)"]


def test_one_line_of_a_real_grpc_error():
    with grpc.insecure_channel("127.0.0.1:1") as channel:  # nothing listens on port 1
        call = channel.unary_unary("/x.Y/Z")
        try:
            call(b"", timeout=2)
        except grpc.RpcError as exc:
            error = exc
    assert "\n" in repr(error)  # what was logged before: four lines
    text = one_line(error)
    assert "\n" not in text and text.startswith(("UNAVAILABLE: ", "DEADLINE_EXCEEDED: "))
    assert one_line(ValueError("first\nsecond")) == "first"
    assert one_line(RuntimeError()) == "RuntimeError"
