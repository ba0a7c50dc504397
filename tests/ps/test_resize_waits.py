"""A resize never stalls silently (docs/operations.md, "Changing the PS count"): with a PS of
its moves down, status and a `ps_resize_waiting` event say which moves wait for which PS and
how to start it, and that PS restarted with its original flags (--num-ps the old count, in
the middle of a resize to another) rejoins and the resize finishes. Real master and PS."""
from __future__ import annotations

import pytest

from protos import master_pb2 as pb

from tests.ps.test_resize_exact import _resize, _settled, _until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_a_resize_waiting_for_a_ps_that_is_down_says_so_and_it_rejoins(launcher):
    master = launcher.master("--ps-slots", "64", "--worker-timeout", "3")  # PS lost after 3 s
    ps = [launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"ps{i}")
          for i in range(2)]
    _until(lambda: master.stub().ListPS(pb.ListPSRequest(), timeout=10).complete,
           why="both PS registered")
    ps[1].kill()
    _until(lambda: any(e.kind == "ps_lost" for e in master.events()), timeout=60,
           why="PS 1 counted lost")
    _resize(master, 3)
    launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2")

    def waiting():
        return [e for e in master.events() if e.kind == "ps_resize_waiting"]

    _until(waiting, timeout=60, why="the ps_resize_waiting event")
    assert "wait for PS 1: down (lost): start elastic-ps --index 1" in waiting()[0].detail
    out = launcher.run("-m", "master.ctl", "--master", master.address, "status")
    assert "WAITING:" in out.stdout and "wait for PS 1: down (lost)" in out.stdout, out.stdout
    # its original flags (--num-ps 2, the count before the resize) are taken mid-resize
    launcher.ps(master.address, index=1, num_ps=2, checkpoint_dir="ps1")
    _until(lambda: _settled(master, 3), timeout=120, why="the resize finishes")
    assert not master.status().layout.waiting
