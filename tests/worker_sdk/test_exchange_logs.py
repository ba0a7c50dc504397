"""What a worker's data-plane calls log when they needed more than one try (issue 37): a
resize's slot hand-overs are expected (INFO, one line and a count, not a WARNING per call),
anything else is a WARNING once per run, and a line about a re-routed call names the address
the failed tries went to, not the new one. Stand-in PS over real ZeroMQ sockets."""
from __future__ import annotations

import logging

import torch

from protos import ps_pb2
from pswire.slots import Layout
from rpckit.errors import Reason
from worker_sdk.ps import exchange as exchange_mod
from worker_sdk.ps.data_client import DataClient
from worker_sdk.ps.routes import Placement, Route
from tests.worker_sdk.test_reroute import StandIn, ctx, serve  # noqa: F401 - the fixture

LOG = exchange_mod.__name__


def _lines(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOG]


def moving():
    return ps_pb2.DataResponse(code=ps_pb2.DataResponse.UNAVAILABLE,
                               reason=Reason.SLOT_MOVING.value,
                               message="PS 0 is handing the slots over"), [], 0


def test_hand_overs_of_a_resize_are_info_and_counted(ctx, caplog):
    """Ten calls each answered SLOT_MOVING once, then calls answered at once: one INFO line
    for the first, one INFO line with the count when calls answer on the first try again."""
    a = StandIn(ctx, lambda n, req, frames: moving() if n <= 20 and n % 2 == 1
                else (*serve(req, frames), 0))
    client = DataClient([a.endpoint], context=ctx, timeout_s=5)
    try:
        client.set_layout({"a": 4})
        with caplog.at_level(logging.INFO, logger=LOG):
            for _ in range(12):
                client.step({"a": torch.ones(1)}, pull=["a"])
    finally:
        client.close()
        a.close()
    lines = _lines(caplog)
    assert not [m for level, m in lines if level >= logging.WARNING], lines
    assert len(lines) == 2, lines
    assert "recovered on try 2" in lines[0][1] and "handing the slots over" in lines[0][1]
    assert lines[1][1].startswith("PS calls answer on the first try again (after 10 times")


def test_a_re_routed_call_names_the_old_address_it_failed_at(monkeypatch, ctx, caplog):
    """PS 0's primary goes silent and the master names a new one: the call recovers there,
    a WARNING (a failover is no routine event) whose reason names the silent address."""
    old = StandIn(ctx, lambda n, req, frames: (*serve(req, frames), 0 if n == 1 else 60.0))
    new = StandIn(ctx, lambda n, req, frames: (*serve(req, frames), 0))
    layout = Layout.initial(1)
    listings = [Route(old.endpoint, generation=1)]

    def placement(master, timeout_s=30.0, poll_s=0.2, *, min_version=0, **_):
        return Placement({0: listings[-1]}, layout)

    monkeypatch.setattr(exchange_mod, "master_placement", placement)
    monkeypatch.setattr(exchange_mod.Exchange, "_master_stub", lambda self: None)
    monkeypatch.setattr(exchange_mod, "IDLE_REFRESH_S", 3600.0)
    client = DataClient(master="fake-master:1", context=ctx, timeout_s=5)
    try:
        client.set_layout({"a": 4})
        client.staleness_checked = {0: False}
        client.step({"a": torch.ones(1)}, pull=["a"])  # answered by the old primary
        listings.append(Route(new.endpoint, generation=2))  # promoted while the next waits
        with caplog.at_level(logging.INFO, logger=LOG):
            out = client.step({"a": torch.ones(1)}, pull=["a"])
    finally:
        client.close()
        old.close()
        new.close()
    assert out.push.versions == {"a": 1}
    warnings = [m for level, m in _lines(caplog) if level >= logging.WARNING]
    assert len(warnings) == 1, _lines(caplog)
    assert f"no answer from PS 0 at {old.endpoint}" in warnings[0]
    assert new.endpoint not in warnings[0]
    assert "a new PS primary was promoted" in warnings[0]
