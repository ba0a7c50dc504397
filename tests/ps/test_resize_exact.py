"""Live PS resize is exact (issue 25): real master and PS processes, a client pushing all the
while, SGD lr 1 and gradients of -1, so afterwards every row and parameter must equal the
number of pushes answered. One test per kind of move: a grow and a shrink; the new owner, the
old owner (with a backup) and the master SIGKILLed in the middle of a move (the failpoint
ps.slots.calls.PAUSE_ENV holds the move between the old owner's export and the new owner's
write, the old owner's slots frozen)."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from protos import master_pb2 as pb
from pswire.optimizers import make_config
from pswire.slots import Layout, plan_resize
from pswire.tables import TableSpec
from ps.slots.calls import PAUSE_ENV
from worker_sdk.ps.data_client import DataClient

pytestmark = pytest.mark.slow

SLOTS = 64
ROWS = 256
NAMES = [f"w{i}" for i in range(8)]


class Pusher:
    """A client stepping all rows and tensors by one per answered step, in a thread whose
    failure fails the test."""

    def __init__(self, master: str):
        self.client = DataClient(master=master, retry_budget_s=90.0)
        self.client.init_parameters({n: torch.zeros(2) for n in NAMES}, make_config("sgd", lr=1.0),
                                    tables=[TableSpec("e", 1, initializer="zeros")])
        self.answered = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.ids = torch.arange(ROWS)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.client.step(grads={n: -torch.ones(2) for n in NAMES},
                                 rows=[("e", self.ids, -torch.ones(ROWS, 1))])
                self.answered += 1
                time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def wait_for(self, more: int, timeout: float = 60.0) -> None:
        target = self.answered + more
        deadline = time.monotonic() + timeout
        while self.answered < target:
            assert self.error is None, f"the pusher failed: {self.error!r}"
            assert time.monotonic() < deadline, "the pusher made no progress"
            time.sleep(0.05)

    def finish(self) -> None:
        """Stop, then check every row and tensor equals the answered pushes."""
        self.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive() and self.error is None, repr(self.error)
        rows = self.client.pull_rows("e", self.ids)
        dense = self.client.pull(NAMES)
        want = float(self.answered)
        assert self.answered > 0
        assert torch.equal(rows, torch.full((ROWS, 1), want)), (
            f"rows differ from the {self.answered} answered pushes: "
            f"{sorted(set(rows.flatten().tolist()))[:8]}")
        for name in NAMES:
            assert torch.equal(dense[name], torch.full((2,), want)), (name, dense[name])
        self.client.close()


def _status(master) -> pb.GetStatusResponse:
    return master.stub().GetStatus(pb.GetStatusRequest(), timeout=10)


def _until(what, timeout: float = 60.0, why: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, f"timed out: {why}"
        time.sleep(0.1)


def _resize(master, n: int) -> None:
    master.stub().ResizePS(pb.ResizePSRequest(num_ps=n), timeout=10)


def _settled(master, n: int) -> bool:
    layout = _status(master).layout
    return layout.num_ps == n and layout.target_num_ps == n and not layout.moves_pending


def _copying(master) -> bool:
    return _status(master).layout.moves_by_phase.get("copying", 0) > 0


def _events(master) -> list[str]:
    return [e.kind for e in master.stub().GetEvents(pb.GetEventsRequest(), timeout=10).events]


def _start(launcher, *flags: str, replicas: int = 0):
    master = launcher.master("--ps-slots", str(SLOTS), "--ps-replicas", str(replicas), *flags)
    ps = [launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"ps{i}")
          for i in range(2)]
    backups = [launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"b{i}")
               for i in range(2)] if replicas else []
    if replicas:
        _until(lambda: all(p.backups and p.backups[0].state == "in_sync" for p in
                           master.stub().ListPS(pb.ListPSRequest(), timeout=10).ps),
               why="backups in sync")
    return master, ps, backups


def test_grow_then_shrink_while_pushing_is_exact(launcher):
    master, ps, _ = _start(launcher)
    pusher = Pusher(master.address)
    pusher.wait_for(20)
    _resize(master, 3)
    added = launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2")
    _until(lambda: _settled(master, 3), why="grow to 3")
    pusher.wait_for(20)
    _resize(master, 2)
    assert added.wait(60) == 0  # its slots moved away: it exits 0
    _until(lambda: _settled(master, 2), why="shrink to 2")
    pusher.wait_for(20)
    pusher.finish()
    kinds = _events(master)
    assert kinds.count("ps_resize_started") == 2 and kinds.count("ps_resize_finished") == 2
    assert "ps_lost" not in kinds  # the PS a shrink removed is not counted lost


def test_the_new_owner_killed_mid_move_loses_nothing(launcher):
    master, ps, _ = _start(launcher)
    pusher = Pusher(master.address)
    pusher.wait_for(10)
    _resize(master, 3)
    added = launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2", env={PAUSE_ENV: "30"})
    _until(lambda: _copying(master), why="a move in its copy")
    added.kill()
    _until(lambda: not _copying(master), why="the move rolled back")
    pusher.wait_for(20)  # the old owner thawed: the rolled-back slots take writes again
    launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2b")
    _until(lambda: _settled(master, 3), why="grow to 3 after the restart")
    pusher.wait_for(20)
    pusher.finish()
    assert "ps_slots_rolled_back" in _events(master)


def test_the_old_owner_killed_mid_move_with_a_backup_loses_nothing(launcher):
    master, ps, backups = _start(launcher, replicas=1)
    pusher = Pusher(master.address)
    pusher.wait_for(10)
    listing = master.stub().ListPS(pb.ListPSRequest(), timeout=10)
    layout = Layout.from_ranges({p.index: [(r.start, r.end) for r in p.slots]
                                 for p in listing.ps}, SLOTS, listing.layout_version)
    first = plan_resize(layout, 3)[0]  # the mover takes the lowest slot first
    _resize(master, 3)
    launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2", env={PAUSE_ENV: "5"})
    # the moves start once the first index-2 PS registers: its backup starts meanwhile (its
    # start-up would otherwise eat the 5 s the copy is held open, and the kill come too late
    # to roll anything back)
    backup = launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="b2",
                         env={PAUSE_ENV: "5"}, wait=False)
    _until(lambda: _copying(master), why="a move in its copy")
    ps[first.src].kill()  # the old owner: its backup takes over, the move rolls back
    launcher.wait_ready(backup)
    _until(lambda: _settled(master, 3), timeout=120, why="grow to 3 after the failover")
    pusher.wait_for(20)
    pusher.finish()
    assert "ps_lost" in _events(master) and "ps_slots_rolled_back" in _events(master)


def test_the_master_killed_mid_move_loses_nothing(launcher):
    master, ps, _ = _start(launcher)
    pusher = Pusher(master.address)
    pusher.wait_for(10)
    _resize(master, 3)
    launcher.ps(master.address, index=2, num_ps=0, checkpoint_dir="ps2", env={PAUSE_ENV: "4"})
    _until(lambda: _copying(master), why="a move in its copy")
    master.kill()
    master.start()  # same database and port: the new leader rolls the copy back, then redoes it
    _until(lambda: _settled(master, 3), timeout=120, why="grow to 3 after the master restart")
    pusher.wait_for(20)
    pusher.finish()
    rolled = [e for e in master.stub().GetEvents(pb.GetEventsRequest(), timeout=10).events
              if e.kind == "ps_slots_rolled_back"]
    assert [e.cause for e in rolled] == ["recovered"]


def _verify(master: str, steps: int) -> None:
    client = DataClient(master=master)
    try:
        rows = client.pull_rows("e", torch.arange(ROWS))
        dense = client.pull()  # every tensor of every PS: this client declared nothing
    finally:
        client.close()
    assert torch.equal(rows, torch.full((ROWS, 1), float(steps)))
    assert sorted(dense) == NAMES
    assert all(torch.equal(dense[n], torch.full((2,), float(steps))) for n in NAMES)


def test_a_set_restarted_with_another_count_restores_through_the_layout(launcher):
    master, ps, _ = _start(launcher)
    pusher = Pusher(master.address)
    pusher.wait_for(15)
    pusher.stop.set()
    pusher.thread.join(60)
    steps = pusher.answered
    pusher.client.close()
    for p in ps:  # SIGTERM: each writes its final checkpoint
        assert p.terminate(60) == 0
    _resize(master, 3)  # with no PS up
    grown = [launcher.ps(master.address, index=i, num_ps=0, checkpoint_dir=f"ps{i}") for i in range(3)]
    _until(lambda: _settled(master, 3), why="the restarted set grows to 3")
    _verify(master.address, steps)
    for p in grown:
        assert p.terminate(60) == 0
    _resize(master, 2)  # and back, restarted again: index 2 hands its slots over, exits 0
    shrunk = [launcher.ps(master.address, index=i, num_ps=0, checkpoint_dir=f"ps{i}") for i in range(3)]
    assert shrunk[2].wait(60) == 0
    _until(lambda: _settled(master, 2), why="the restarted set shrinks to 2")
    _verify(master.address, steps)
