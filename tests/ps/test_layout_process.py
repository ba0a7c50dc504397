"""Real elastic-ps processes against the master's PS layout: a stray PS exits 1 with the fix
and never takes a place; without --num-ps a PS takes its count from the layout, and an index
a resize adds joins."""
from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from protos import master_pb2 as pb
from protos import ps_pb2, ps_pb2_grpc

pytestmark = pytest.mark.slow


def _listing(master) -> pb.ListPSResponse:
    return master.stub().ListPS(pb.ListPSRequest(), timeout=10)


def _until(what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_stray_ps_exits_1_with_the_fix_and_an_added_index_joins(launcher, tmp_path):
    master = launcher.master("--ps-slots", "64")
    running = [launcher.ps(master.address, index=i, num_ps=2) for i in range(2)]
    _until(lambda: _listing(master).complete)
    before = [(p.address, p.incarnation) for p in _listing(master).ps]

    # the stray PS of issue 25, with --num-ps and without: refused, exits 1, leaves no file
    stray = launcher.ps(master.address, index=2, num_ps=3, wait=False,
                        checkpoint_dir=tmp_path / "stray")
    assert stray.wait(60) == 1
    assert "elastic-ctl resize-ps 3" in stray.output()
    assert not list(Path(tmp_path / "stray").glob("*.ckpt"))
    unsized = launcher.ps(master.address, index=2, num_ps=0, wait=False)
    assert unsized.wait(60) == 1 and "elastic-ctl resize-ps 3" in unsized.output()
    assert [(p.address, p.incarnation) for p in _listing(master).ps] == before
    assert all(p.alive for p in running)

    # after resize-ps 3 the same index joins, its count from the layout's target
    master.stub().ResizePS(pb.ResizePSRequest(num_ps=3), timeout=10)
    added = launcher.ps(master.address, index=2, num_ps=0)
    status = ps_pb2_grpc.ParameterServerStub(grpc.insecure_channel(added.grpc_address)) \
        .GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=10)
    assert (status.index, status.num_ps) == (2, 3)
    # it joins, and the master moves slots to it live (master/ps/mover.py) until every index
    # holds its share: 64 slots over 3 PS
    _until(lambda: not master.stub().GetStatus(pb.GetStatusRequest(), timeout=10)
           .layout.moves_pending and _listing(master).num_ps == 3)
    listing = _listing(master)
    shares = sorted(sum(r.end - r.start for r in p.slots) for p in listing.ps)
    assert listing.complete and listing.target_num_ps == 3 and shares == [21, 21, 22]
    assert [p.address for p in listing.ps][2] == added.grpc_address
    time.sleep(2.5)  # a registration check later it is still registered, once
    assert [p.incarnation for p in _listing(master).ps] == [1, 1, 1] and added.alive
