"""The master's PS layout (master/ps/layout.py) through the core, on a real in-memory store
committed by hand (tests/master/harness.py, a fake clock): registrations, resize, the move
hooks, restarts."""
from __future__ import annotations

import pytest

from master.core import MasterCore, Settings
from master.ps.layout import SlotsMismatch
from master.states import MovePhase
from rpckit.errors import ServiceError
from tests.master.harness import Harness


def _register(h, index, num_ps, port=None):
    port = port or 100 + index
    h.core.register_ps(f"10.0.0.{index}:{port}", f"tcp://10.0.0.{index}:{port + 1}", index,
                       num_ps)
    h.commit()


def _events(h, kind):
    return [e for e in h.store.events(0, 10_000) if e["kind"] == kind]


def _refused(fn, reason, *texts):
    with pytest.raises(ServiceError) as info:
        fn()
    assert info.value.reason == reason, info.value.message
    for text in texts:
        assert text in info.value.message
    return info.value


def _cover(layout):
    spans = sorted((r.start, r.end) for i in range(layout.num_ps) for r in layout.ranges(i))
    assert spans[0][0] == 0 and spans[-1][1] == layout.ps_slots
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    return spans


def test_the_first_ps_makes_the_layout_and_it_is_durable():
    h = Harness(Settings(ps_slots=64))
    assert h.core.layout.version == 0 and h.core.list_ps() == ([], 0, False)
    _register(h, 1, 2)
    layout = h.core.layout
    assert (layout.version, layout.num_ps, layout.target) == (1, 2, 2)
    assert [(r.start, r.end) for r in layout.ranges(1)] == [(32, 64)]
    assert "layout version 1 made: 64 slots over 2 PS" in _events(h, "ps_registered")[0]["detail"]
    _register(h, 0, 0)  # --num-ps left out
    assert h.core.list_ps()[1:] == (2, True) and h.core.ps[0]["num_ps"] == 2
    h.restart()
    assert h.core.layout.version == 1 and _cover(h.core.layout) == [(0, 32), (32, 64)]


def test_registrations_that_do_not_fit_are_refused_and_change_nothing():
    h = Harness(Settings(ps_slots=64))
    _register(h, 0, 2)
    _register(h, 1, 2)
    before = h.store.load()
    for index, num_ps, fix in ((2, 3, "resize-ps 3"), (2, 0, "resize-ps 3"),
                               (0, 3, "resize-ps 3"), (5, 0, "resize-ps 6")):
        err = _refused(lambda: h.core.register_ps("h:1", "tcp://h:2", index, num_ps),
                       "LAYOUT_MISMATCH", fix)
        assert err.code == "FAILED_PRECONDITION"
    h.commit()
    after = h.store.load()
    assert (after.ps, after.ps_layout, after.max_event_seq) == (
        before.ps, before.ps_layout, before.max_event_seq)


def test_a_master_restarted_with_other_ps_slots_is_refused():
    h = Harness(Settings(ps_slots=64))
    _register(h, 0, 1)
    with pytest.raises(SlotsMismatch, match="--ps-slots 64"):
        MasterCore(Settings(ps_slots=128), clock=h.clock, snapshot=h.store.load())


def test_resize_records_the_target_plans_the_moves_and_lets_the_new_indices_join():
    h = Harness(Settings(ps_slots=64))
    _register(h, 0, 2)
    _register(h, 1, 2)
    for bad in (0, -1, 65, 2000):
        _refused(lambda: h.core.resize_ps(bad), "INVALID_ARGUMENT", "1..64")
    h.commit()
    assert not _events(h, "ps_resize_started") and h.core.layout.target == 2
    done = h.core.resize_ps(3)
    h.commit()
    assert (done.changed, done.version, done.num_ps, done.target) == (True, 1, 2, 3)
    assert done.moves_planned == done.moves_pending == 21  # ceil(64 / 3) at most
    assert {m.dst for m in h.core.layout.moves.values()} == {2}
    (started,) = _events(h, "ps_resize_started")
    assert started["cause"] == "grow" and "21 of 64 slots" in started["detail"]
    assert not h.core.resize_ps(3).changed  # the same target again: nothing new
    # the new index joins (its --num-ps left out, or the target); a member restarted
    # mid-resize may give either count (issue 38), no third one
    _register(h, 2, 0)
    _refused(lambda: h.core.register_ps("h:1", "tcp://h:2", 1, 4), "LAYOUT_MISMATCH",
             "leave --num-ps out or give a count from 2 to 3")
    _register(h, 1, 3)
    assert h.core.ps[1]["num_ps"] == 3
    _refused(lambda: h.core.register_ps("h:1", "tcp://h:2", 3, 0), "LAYOUT_MISMATCH",
             "resize-ps 4")
    rows, num_ps, complete = h.core.list_ps()
    assert num_ps == 2 and complete and [r["idx"] for r in rows] == [0, 1]
    assert [r["idx"] for r in h.core.ps_set.joining()] == [2]
    assert h.core.ps[2]["num_ps"] == 3
    h.restart()  # all of it durable
    layout = h.core.layout
    assert (layout.target, layout.moves_planned, len(layout.moves)) == (3, 21, 21)
    assert all(m.phase == MovePhase.PLANNED for m in layout.moves.values())
    assert [r["idx"] for r in h.core.ps_set.joining()] == [2]


def test_resize_before_any_ps_makes_the_layout_at_that_size():
    h = Harness(Settings(ps_slots=16))
    done = h.core.resize_ps(4)
    h.commit()
    assert (done.version, done.num_ps, done.target, done.moves_planned) == (1, 4, 4, 0)
    assert [e["cause"] for e in h.store.events(0, 100)
            if e["kind"].startswith("ps_resize")] == ["no_layout", "no_layout"]
    _refused(lambda: h.core.register_ps("h:1", "tcp://h:2", 0, 2), "LAYOUT_MISMATCH")
    _register(h, 3, 0)
    assert h.core.ps[3]["num_ps"] == 4


def test_the_move_hooks_hand_slots_over_and_finish_the_resize():
    h = Harness(Settings(ps_slots=16))
    _register(h, 0, 2)
    _register(h, 1, 2)
    h.clock.advance(1)
    h.core.resize_ps(3)
    h.commit()
    layout = h.core.layout
    slots = sorted(layout.moves)
    assert len(slots) == 5
    layout.set_phase(slots[:2], MovePhase.COPYING)
    # a new target while slots are copying: replanned only once no move is past planning
    assert layout.roll_back() == slots[:2]
    layout.set_phase(slots[:2], MovePhase.HANDOVER)
    _refused(lambda: h.core.resize_ps(2), "RESIZE_IN_PROGRESS", "resize-ps 2")
    with pytest.raises(ValueError):
        layout.set_phase(slots[:1], MovePhase.COPYING)
    h.clock.advance(2)
    layout.moved(slots[:2], seconds=0.5)
    h.commit()
    assert layout.version == 2 and layout.num_ps == 3  # index 2 owns slots now
    assert len(layout.moves) == 3 and not _events(h, "ps_resize_finished")
    (moved,) = _events(h, "ps_slots_moved")
    assert "2 slots in 0.500 s" in moved["detail"] and "layout version 2" in moved["detail"]
    layout.moved(slots[2:])
    h.commit()
    assert layout.version == 3 and not layout.resizing and layout.layout.shares() == [6, 5, 5]
    (finished,) = _events(h, "ps_resize_finished")
    assert finished["cause"] == "done" and "3 PS, layout version 3" in finished["detail"]
    h.restart()
    assert h.core.layout.version == 3 and h.core.layout.layout.shares() == [6, 5, 5]
    assert not h.core.layout.moves and _cover(h.core.layout)


def test_a_resize_back_before_anything_moved_cancels_it():
    h = Harness(Settings(ps_slots=16))
    _register(h, 0, 2)
    h.core.resize_ps(4)
    done = h.core.resize_ps(2)
    h.commit()
    assert (done.changed, done.moves_planned, done.moves_pending) == (True, 0, 0)
    assert not h.core.layout.resizing and h.core.layout.version == 1
    assert [e["cause"] for e in _events(h, "ps_resize_finished")] == ["cancelled"]
    h.restart()
    assert not h.core.layout.moves and h.core.layout.target == 2


def test_a_database_from_before_the_layout_is_adopted_with_its_count():
    h = Harness(Settings(ps_slots=8))
    h.core.journal.batch.insert("ps", 0, dict(idx=0, address="h:1", data_address="tcp://h:2",
                                              num_ps=2, registered_ms=1, incarnation=1,
                                              data_public_key=""))
    h.commit()
    h.restart()
    assert h.core.layout.version == 1 and h.core.list_ps()[1] == 2
    h.restart()
    assert h.core.layout.version == 1


# ---- a PS that starts empty: lost only where the layout says its index held state -------------


def test_an_empty_start_is_a_loss_only_where_the_index_held_state():
    from master.ps import restores
    from protos import master_pb2

    h = Harness(Settings(ps_slots=64))
    assert not restores.held_state(h.core.ps_set, 0)  # a first start: nothing held
    _register(h, 0, 2)
    _register(h, 1, 2)
    assert restores.held_state(h.core.ps_set, 0) and restores.held_state(h.core.ps_set, 1)
    h.core.resize_ps(3)
    h.commit()
    _register(h, 2, 3)
    # index 2 registered, but no slot moved to it yet: its restart lost nothing
    assert not restores.held_state(h.core.ps_set, 2)
    empty = master_pb2.RestoredCheckpoint(taken_ms=0, started_ms=5_000, empty=True)
    restores.record(h.core.journal, 1, empty)
    h.commit()
    (event,) = _events(h, restores.KIND)
    assert event["cause"] == "empty"
    assert restores.windows([event]) == {1: [(0, 5_000)]}
    with pytest.raises(ServiceError):  # an empty start restored no snapshot
        restores.check(master_pb2.RestoredCheckpoint(taken_ms=7, started_ms=9, empty=True),
                       10_000)
    with pytest.raises(ServiceError):  # bounded where accepted
        restores.check(master_pb2.RestoredCheckpoint(
            taken_ms=1, started_ms=2, tensors=[f"t{i}" for i in range(restores.MAX_MARKS + 1)]),
            10_000)


def test_status_says_which_moves_wait_for_which_ps_and_why():
    from master.views import status_view

    h = Harness(Settings(ps_slots=64))
    _register(h, 0, 2)
    _register(h, 1, 2)
    h.core.resize_ps(3)
    h.commit()
    lines = list(status_view(h.core).layout.waiting)
    assert [line.split(":")[0] for line in lines] == [
        "10 slot moves PS 0 -> PS 2 wait for PS 2", "11 slot moves PS 1 -> PS 2 wait for PS 2"]
    assert all("not registered: start elastic-ps --index 2 (--num-ps left out" in line
               for line in lines)
    _register(h, 2, 0)
    assert not status_view(h.core).layout.waiting  # every index up: nothing waits
    h.core.mark_ps_lost(1, h.core.ps[1]["incarnation"], "test")
    h.commit()
    waiting = "".join(status_view(h.core).layout.waiting)
    assert "wait for PS 1: down (lost): start elastic-ps --index 1 (--num-ps left out" in waiting
    h.core.layout.refusal = "the last batch failed"
    assert status_view(h.core).layout.waiting[-1] == "the last batch failed"
