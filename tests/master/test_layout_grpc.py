"""The PS layout through a real master process: ListPS, RegisterPS's rule, ResizePS, a SIGKILL
and restart, --ps-slots fixed for the job, elastic-ctl resize-ps and status."""
from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from protos import master_pb2 as pb
from rpckit.errors import reason_of
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _register(stub, index, num_ps):
    return stub.RegisterPS(pb.RegisterPSRequest(
        address=f"127.0.0.1:{40000 + index}", data_address=f"tcp://127.0.0.1:{41000 + index}",
        index=index, num_ps=num_ps), timeout=10)


def _refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def _cover(listing: pb.ListPSResponse) -> list[tuple[int, int]]:
    """Every slot exactly once, or the assertion says which not."""
    spans = sorted((r.start, r.end) for p in listing.ps for r in p.slots)
    covered = [s for a, b in spans for s in range(a, b)]
    assert covered == list(range(listing.ps_slots)), spans
    return spans


def _ctl(master, *args):
    return subprocess.run([sys.executable, "-m", "master.ctl", "--master", master.address,
                           *args], capture_output=True, text=True, timeout=30, cwd=REPO)


def test_the_layout_is_listed_enforced_resized_and_survives_a_sigkill(master_factory):
    master = master_factory("--ps-slots", "96")
    stub = master.stub()
    empty = stub.ListPS(pb.ListPSRequest(), timeout=10)
    assert (empty.layout_version, empty.ps_slots, empty.num_ps) == (0, 96, 0)
    _register(stub, 0, 2)
    _register(stub, 1, 0)  # --num-ps left out: the layout's
    listing = stub.ListPS(pb.ListPSRequest(), timeout=10)
    assert (listing.layout_version, listing.num_ps, listing.target_num_ps) == (1, 2, 2)
    assert _cover(listing) == [(0, 48), (48, 96)]
    assert [p.num_ps for p in listing.ps] == [2, 2]

    # a PS whose index or --num-ps does not fit: refused, with the fix, nothing changes
    for index, num_ps in ((2, 3), (2, 0), (1, 3)):
        err = _refusal(lambda: _register(stub, index, num_ps))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(err) == "LAYOUT_MISMATCH" and "resize-ps 3" in err.details()
    # a bad size: INVALID_ARGUMENT, nothing changes
    for bad in (0, -2, 97, 5000):
        err = _refusal(lambda: stub.ResizePS(pb.ResizePSRequest(num_ps=bad), timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    assert stub.ListPS(pb.ListPSRequest(), timeout=10) == listing
    assert not [e for e in master.events() if e.kind.startswith("ps_resize")]

    done = stub.ResizePS(pb.ResizePSRequest(num_ps=3), timeout=10)
    assert (done.changed, done.layout_version, done.num_ps, done.target_num_ps) == (
        True, 1, 2, 3)
    assert done.moves_planned == done.moves_pending == 32 and done.ps_slots == 96
    _register(stub, 2, 3)  # the index the grow adds
    (started,) = [e for e in master.events() if e.kind == "ps_resize_started"]
    assert started.cause == "grow" and "32 of 96 slots" in started.detail

    master.restart()  # SIGKILL: every acknowledged change was committed before its answer
    stub = master.stub()
    after = stub.ListPS(pb.ListPSRequest(), timeout=10)
    assert (after.layout_version, after.num_ps, after.target_num_ps) == (1, 2, 3)
    assert _cover(after) == [(0, 48), (48, 96)] and [p.index for p in after.ps] == [0, 1]
    assert [(p.index, list(p.slots)) for p in after.joining] == [(2, [])]
    layout = master.status().layout
    assert (layout.resizing, layout.moves_planned, layout.moves_pending) == (True, 32, 32)
    # the master's mover keeps trying the moves (these PS are registrations without a
    # process: each try rolls back), so a move may be caught copying
    assert sum(layout.moves_by_phase.values()) == 32
    assert set(layout.moves_by_phase) <= {"planned", "copying"}
    err = _refusal(lambda: _register(stub, 3, 0))
    assert reason_of(err) == "LAYOUT_MISMATCH" and "resize-ps 4" in err.details()

    out = _ctl(master, "status")
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("PS LAYOUT")[1].split("PARAMETER SERVERS")[0]
    assert "version 1: 96 slots over 2 PS" in text
    assert "resizing to 3 PS: 0 of 32 slot moves done (" in text
    assert "0:48" in text and "2 (joining)" in text
    out = _ctl(master, "resize-ps", "0")
    assert out.returncode == 1 and "INVALID_ARGUMENT" in out.stderr
    out = _ctl(master, "resize-ps", "3")
    assert out.returncode == 0 and "already has the target 3" in out.stdout

    # --ps-slots is fixed for the job: another value on the same database is refused
    master.kill()
    refused = subprocess.run([*master.argv[:-2], "--ps-slots", "128"], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
    assert refused.returncode == 1
    assert "--ps-slots 128" in refused.stderr and "--ps-slots 96" in refused.stderr
