"""Every field of the PS's gRPC control service made hostile, one at a time, against a real PS
process registered with a real master (issue 37; the walk is tests/rpckit/hostile.py's).

The answer is never INTERNAL or UNKNOWN, a refusal carries an ErrorInfo reason, undecodable
bytes are INVALID_ARGUMENT (UNDECODABLE), and the PS stays up, healthy and serving its slots.
"""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import master_pb2 as mpb
from protos import ps_pb2 as pb
from rpckit.errors import reason_of
from tests.rpckit.hostile import variants

pytestmark = pytest.mark.slow

BUGS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
SLOTS = 64
Move = pb.MoveSlotsRequest


def _bases(ps) -> dict[str, list]:
    """Per RPC, requests the PS answers without a bug: an ABORT of a slot it owns (nothing
    was moving: a no-op), a LAYOUT of an older version (changes nothing) and an IMPORT from
    itself (refused: it owns the slot already)."""
    return {
        "Checkpoint": [pb.CheckpointRequest()],
        "GetPSStatus": [pb.GetPSStatusRequest()],
        "MoveSlots": [
            Move(action=Move.ABORT, slots=[0], layout_version=1, attempt=1),
            Move(action=Move.LAYOUT, owned=f"0:{SLOTS}", layout_version=1),
            Move(action=Move.IMPORT, slots=[0], layout_version=1, attempt=2,
                 src_data_address=ps.data_address),
        ],
    }


def test_every_field_of_the_ps_control_service_answers_hostile_input_cleanly(launcher):
    master = launcher.master("--ps-slots", str(SLOTS))
    ps = launcher.ps(master.address)
    channel = grpc.insecure_channel(ps.grpc_address)
    service = pb.DESCRIPTOR.services_by_name["ParameterServer"]
    bases = _bases(ps)
    assert set(bases) == {m.name for m in service.methods}, "a new RPC needs a base here"
    seen = {"refused": 0, "accepted": 0}
    for method in service.methods:
        call = channel.unary_unary(f"/{service.full_name}/{method.name}",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=lambda b: b)
        for base in bases[method.name]:
            for where, request in [("base", base), *variants(base)]:
                seen[_send(call, request, f"{method.name}.{where}")] += 1
        for data in (b"\xff\xff\xff\xff", b"\x08" + b"\xff" * 11):
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(f"/{service.full_name}/{method.name}")(data, timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method.name
            assert reason_of(info.value) == "UNDECODABLE"
    assert seen["refused"] > 50 and seen["accepted"] > 5, seen
    assert ps.alive
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    listing = master.stub().ListPS(mpb.ListPSRequest(), timeout=10)
    assert [(r.start, r.end) for r in listing.ps[0].slots] == [(0, SLOTS)]


def _send(call, request, where: str) -> str:
    try:
        call(request, timeout=60)
        return "accepted"
    except grpc.RpcError as exc:
        assert exc.code() not in BUGS, (where, exc.code(), exc.details())
        assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED, where
        assert reason_of(exc), (where, exc.code(), exc.details())
        assert len(exc.details()) < 1000, where
        return "refused"
