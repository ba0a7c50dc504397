"""A table's max_rows follows the PS layout (docs/ps.md, "Bounded embedding tables"): each PS's
share is the fraction of the slots it owns, re-split at every layout change, so the rows held
over all PS stay within max_rows plus the PS count across 2 -> 3 -> 1, and the one PS left
after the shrink holds the whole cap (not the half it started with). Real master and PS."""
from __future__ import annotations

import grpc
import pytest
import torch

from master.ctl.tables import format_tables
from protos import ps_pb2, ps_pb2_grpc
from pswire.optimizers import make_config
from pswire.tables import TableSpec
from tests.ps.test_resize_exact import _resize, _settled, _until
from worker_sdk.ps.data_client import DataClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLOTS = 64
CAP = 400


def _rows(procs) -> list[int]:
    out = []
    for p in procs:
        with grpc.insecure_channel(p.grpc_address) as channel:
            status = ps_pb2_grpc.ParameterServerStub(channel).GetPSStatus(
                ps_pb2.GetPSStatusRequest(), timeout=10)
        out.append(sum(t.rows for t in status.tables if t.spec.name == "c"))
    return out


def _fill(client: DataClient, start: int, n: int = 3000) -> None:
    for at in range(start, start + n, 500):  # distinct ids, more than the cap
        client.pull_rows("c", torch.arange(at, at + 500))


def test_caps_follow_the_layout_across_2_3_1(launcher):
    master = launcher.master("--ps-slots", str(SLOTS))
    ps = [launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"ps{i}")
          for i in range(2)]
    client = DataClient(master=master.address, retry_budget_s=60.0)
    try:
        client.init_parameters({"w": torch.zeros(2)}, make_config("sgd", lr=1.0),
                               tables=[TableSpec("c", 2, initializer="zeros", max_rows=CAP)])
        _fill(client, 0)
        held = _rows(ps)
        assert sum(held) <= CAP + 2 and min(held) > CAP // 4, held
        _resize(master, 3)
        ps.append(launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2"))
        _until(lambda: _settled(master, 3), timeout=120, why="grow to 3")
        _fill(client, 10_000)
        held = _rows(ps)
        assert sum(held) <= CAP + 3, held  # 2 -> 3 used to hold up to 4/3 of the cap
        assert all(h <= -(-CAP * 22 // SLOTS) for h in held), held  # 22 slots at most each
        _resize(master, 1)
        for p in ps[1:]:
            assert p.wait(120) == 0, p.output(tail=2000)  # their slots moved away
        _until(lambda: _settled(master, 1), timeout=120, why="shrink to 1")
        _fill(client, 20_000)
        (last,) = _rows(ps[:1])
        # the whole cap, not the half PS 0 started with (evictions make room a batch at a time)
        assert CAP // 2 + CAP // 4 < last <= CAP + 1, last
    finally:
        client.close()


def test_status_warns_while_a_table_is_over_its_cap():
    def status(*rows):
        return ps_pb2.GetPSStatusResponse(tables=[ps_pb2.TableStatus(
            spec=ps_pb2.TableSpec(name="c", dim=2, max_rows=CAP), rows=r) for r in rows])

    assert "WARNING" not in format_tables([status(200), status(202)])
    text = format_tables([status(300), status(200)])
    assert "WARNING: table c holds 500 rows, over its max_rows 400 plus 2 PS" in text
