"""Following the leader over a list of addresses: where the next call goes (no network), and
a LeaderStub against real servers."""
from __future__ import annotations

import grpc
import pytest

from rpckit.channels import STANDBY_POLL_S, Endpoints, LeaderStub, parse_addresses
from rpckit.errors import Reason, ServiceError, abort, metadata_of, reason_of
from rpckit.server import build_server
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc


def test_parse_addresses():
    assert parse_addresses(" a:1, b:2,,a:1 ") == ["a:1", "b:2"]
    assert parse_addresses(["a:1"]) == ["a:1"]
    with pytest.raises(ValueError):
        parse_addresses(" , ")


def test_a_failed_address_moves_on_to_the_next_then_gives_up_after_a_round():
    e = Endpoints("a:1,b:2,c:3")
    assert e.failed("a:1") and e.current == "b:2"
    assert e.failed("b:2") and e.current == "c:3"
    assert not e.failed("c:3") and e.current == "a:1"  # every address failed once: wait
    assert e.retry_cap() == float("inf")  # nobody answered: the caller's backoff decides


def test_a_standby_sends_the_next_call_to_the_leader_it_names():
    e = Endpoints("a:1,b:2,c:3")
    assert e.failed("a:1", hint="c:3", standby=True) and e.current == "c:3"
    assert e.retry_cap() == STANDBY_POLL_S
    e.succeeded("c:3")
    assert e.current == "c:3" and e.retry_cap() == float("inf")


def test_a_leader_outside_the_list_is_followed():
    e = Endpoints("a:1")
    assert e.failed("a:1", hint="z:9", standby=True) and e.current == "z:9"
    e.failed("z:9")
    assert e.current == "a:1"


def test_a_stale_answer_about_an_address_no_longer_current_changes_nothing():
    e = Endpoints("a:1,b:2")
    e.failed("a:1")
    assert e.failed("a:1") and e.current == "b:2"


class Standby(pb_grpc.MasterServicer):
    def __init__(self, leader):
        self.leader = leader

    def GetStatus(self, request, context):
        abort(context, ServiceError("UNAVAILABLE", Reason.NOT_LEADER, "standby",
                                    {"leader": self.leader}))


class Leader(pb_grpc.MasterServicer):
    def GetStatus(self, request, context):
        return pb.GetStatusResponse(time_ms=7)


def _serve(servicer):
    server, port, _ = build_server("127.0.0.1", 0, 4,
                                   [(pb_grpc.add_MasterServicer_to_server, servicer)], [])
    server.start()
    return server, f"127.0.0.1:{port}"


def test_leader_stub_hops_from_a_dead_address_and_a_standby_to_the_leader():
    leader, leader_at = _serve(Leader())
    standby, standby_at = _serve(Standby(leader_at))
    dead = "127.0.0.1:1"
    stub = LeaderStub([dead, standby_at], pb_grpc.MasterStub)
    try:
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=5).time_ms == 7
        assert stub.address == leader_at
        with grpc.insecure_channel(standby_at) as channel:
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.MasterStub(channel).GetStatus(pb.GetStatusRequest(), timeout=5)
        assert reason_of(err.value) == Reason.NOT_LEADER
        assert metadata_of(err.value) == {"leader": leader_at}
    finally:
        stub.close()
        leader.stop(0)
        standby.stop(0)


def test_leader_stub_raises_when_no_address_serves():
    stub = LeaderStub("127.0.0.1:1,127.0.0.1:2", pb_grpc.MasterStub)
    try:
        with pytest.raises(grpc.RpcError) as err:
            stub.GetStatus(pb.GetStatusRequest(), timeout=2)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stub.close()
