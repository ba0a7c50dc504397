"""What a MoveSlots call may carry (ps/slots/bounds.py), without a PS: each bound refuses
INVALID_ARGUMENT, and what the master sends passes."""
from __future__ import annotations

import pytest

from protos import ps_pb2
from ps.slots.bounds import check_move
from rpckit.errors import ServiceError

Move = ps_pb2.MoveSlotsRequest
KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a Z85 CURVE public key's shape


def _import(**kw) -> ps_pb2.MoveSlotsRequest:
    base = dict(action=Move.IMPORT, slots=[0, 63], layout_version=4, attempt=2,
                src_data_address="tcp://10.0.0.1:5555")
    return Move(**{**base, **kw})


@pytest.mark.parametrize("request_", [
    _import(), _import(src_data_address="tcp://[fe80::1%eth0]:1", src_public_key=KEY),
    Move(action=Move.ABORT, slots=list(range(64)), attempt=(1 << 63) - 1),
    Move(action=Move.LAYOUT, owned="0:32,40:64", layout_version=9),
    Move(action=Move.LAYOUT, owned="", layout_version=9),
    Move(action=Move.PREPARE),
])
def test_what_the_master_sends_passes(request_):
    check_move(request_, 64)


@pytest.mark.parametrize("request_,word", [
    (Move(action=Move.ACTION_UNSPECIFIED, slots=[0]), "action"),
    (Move(action=999, slots=[0]), "action"),
    (_import(slots=[]), "1..64 slots"),
    (_import(slots=[0] * 65), "1..64 slots"),
    (_import(slots=[64]), "outside"),
    (_import(slots=[-1]), "outside"),
    (Move(action=Move.ABORT, slots=[1 << 30]), "outside"),
    (_import(layout_version=-1), "layout_version"),
    (_import(attempt=-5), "attempt"),
    (_import(src_data_address=""), "src_data_address"),
    (_import(src_data_address="10.0.0.1:5555"), "src_data_address"),
    (_import(src_data_address="tcp://h:0"), "src_data_address"),
    (_import(src_data_address="tcp://h:70000"), "src_data_address"),
    (_import(src_data_address="tcp://" + "h" * 300 + ":1"), "src_data_address"),
    (_import(src_public_key="zz-unknown"), "src_public_key"),
    (Move(action=Move.LAYOUT, owned="0:1," * 1000), "owned"),
    (Move(action=Move.PREPARE, slots=[0]), "PREPARE"),
    (Move(action=Move.PREPARE, src_data_address="tcp://h:1"), "PREPARE"),
])
def test_each_bound_refuses_invalid_argument(request_, word):
    with pytest.raises(ServiceError) as info:
        check_move(request_, 64)
    assert info.value.code == "INVALID_ARGUMENT" and info.value.reason == "INVALID_ARGUMENT"
    assert word in info.value.message and len(info.value.message) < 300
