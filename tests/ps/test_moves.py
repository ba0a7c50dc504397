"""A store's side of a live slot move (ps/slots/moves.py) and the refusals ownership brings
(ps/slots/ownership.py, ps/dataplane/handlers.py), without a network: export freezes, install
writes without serving, the layout hands over, abort rolls back; WRONG_OWNER, SLOT_MOVING and
a retried mutation after its slots moved."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from protos import ps_pb2
from ps.slots import moves, wire as move_wire
from ps.dataplane.handlers import Handlers
from ps.store.gate import Gate
from ps.slots.ownership import Ownership
from ps.store.params import ParamStore
from pswire.frames import as_buffer, meta_of
from pswire.optimizers import make_config
from pswire.slots import row_slot, tensor_slot
from pswire.tables import TableSpec
from rpckit.errors import Reason, ServiceError

SLOTS = 64
ADAGRAD = make_config("adagrad", lr=0.5)
NAMES = [f"t{i}" for i in range(12)]


def _store(index: int, owned: np.ndarray, version: int = 1, init: bool = True) -> ParamStore:
    s = ParamStore(index=index, num_ps=2)
    s.ownership = Ownership(index, owned, version)
    if init:
        s.init_parameters([(n, torch.zeros(3)) for n in NAMES], ADAGRAD,
                          [(TableSpec("e", 4, initializer="zeros"), None)])
    return s


def _contents(*stores) -> tuple[dict, dict]:
    rows, dense = {}, {}
    for s in stores:
        for i, (w, a, count, step) in s.tables["e"].rows().items():
            assert i not in rows, f"row {i} on two PS"
            rows[i] = (w, a, count)
        for n, d in s.dense.items():
            assert n not in dense, f"tensor {n} on two PS"
            dense[n] = (d.value.clone(), d.version, d.optimizer.state_dict()["state"][0]["sum"])
    return rows, dense


def _push_all(s: ParamStore, seq: int, ids: torch.Tensor) -> None:
    s.push_rows("c", seq, "e", ids, -torch.ones(ids.numel(), 4))
    s.push("c", seq + 1, [(n, -torch.ones(3)) for n in NAMES], [0] * len(NAMES))


def _shipped(state: dict, dst: ParamStore) -> dict:
    """An export as the new owner reads it off the wire (ps/slots/wire.py)."""
    return move_wire.decode(move_wire.encode(state), dst)


def _move(src: ParamStore, dst: ParamStore, slots: np.ndarray, version: int,
          between=lambda: None) -> dict:
    """The copy (slots serving), `between` (writes meanwhile), the hand-over, the layout."""
    done = moves.install(dst, _shipped(moves.export(src, slots, version, 7, handover=False), dst))
    between()
    moves.install(dst, _shipped(moves.export(src, slots, version, 7), dst))
    owned_src, owned_dst = src.ownership.owned.copy(), dst.ownership.owned.copy()
    owned_src[slots], owned_dst[slots] = False, True
    moves.apply_layout(dst, owned_dst, version)
    moves.apply_layout(src, owned_src, version)
    return done


def test_a_moved_slot_carries_rows_tensors_and_optimizer_state():
    """The copy, writes while it runs (taken by the hand-over's delta), the hand-over: the two
    PS together hold exactly what one PS that never moved anything holds."""
    src = _store(0, np.ones(SLOTS, bool))
    ref = _store(0, np.ones(SLOTS, bool))
    dst = _store(1, np.zeros(SLOTS, bool), init=False)
    ids = torch.arange(500)
    for s in (src, ref):
        _push_all(s, 1, ids)
        _push_all(s, 3, ids[:200])
    slots = np.arange(SLOTS // 2, SLOTS)
    done = _move(src, dst, slots, 2, between=lambda: _push_all(src, 5, ids[100:300]))
    _push_all(ref, 5, ids[100:300])
    moved_rows = int(np.isin(row_slot(ids.numpy(), SLOTS), slots).sum())
    assert done["rows"] == moved_rows > 0  # the copy took them all
    assert dst.initialized and dst.optimizer_cfg == ADAGRAD
    want, got = _contents(ref), _contents(src, dst)
    assert got[0].keys() == want[0].keys() and got[1].keys() == want[1].keys()
    for i, (w, a, count) in want[0].items():
        w2, a2, count2 = got[0][i]
        assert torch.equal(w, w2) and torch.equal(a, a2) and count == count2, i
    for n, (v, version, accum) in want[1].items():
        v2, version2, accum2 = got[1][n]
        assert torch.equal(v, v2) and version == version2 and torch.equal(accum, accum2)
    # each side holds exactly its slots' rows and tensors
    assert all(np.isin(row_slot(np.array(list(dst.tables["e"].rows())), SLOTS), slots))
    assert not any(np.isin(row_slot(np.array(list(src.tables["e"].rows())), SLOTS), slots))
    assert all(tensor_slot(n, SLOTS) >= SLOTS // 2 for n in dst.dense)
    # the marks stay with the old owner: they say what it applied of each seq, not what
    # the new owner did (its own part of a seq is not a duplicate there)
    assert not dst.applied.seen("c", 1) and src.applied.seen("c", 6)
    # and the new owner goes on from the moved state (Adagrad's sums included)
    mine = ids[np.isin(row_slot(ids.numpy(), SLOTS), slots)]
    for s in (dst, ref):
        s.push_rows("c", 7, "e", mine, -torch.ones(mine.numel(), 4))
    assert all(torch.equal(dst.tables["e"].rows()[i][0], ref.tables["e"].rows()[i][0])
               for i in mine.tolist())


def test_the_hand_over_sends_only_what_changed_since_the_copy():
    src = _store(0, np.ones(SLOTS, bool))
    dst = _store(1, np.zeros(SLOTS, bool), init=False)
    _push_all(src, 1, torch.arange(2000))
    slots = np.arange(0, SLOTS // 2)
    copy = moves.export(src, slots, 2, 9, handover=False)
    touched = torch.arange(10)
    src.push_rows("c", 3, "e", touched, -torch.ones(10, 4))
    final = moves.export(src, slots, 2, 9)
    in_slots = np.isin(row_slot(touched.numpy(), SLOTS), slots)
    assert copy["tables"][0]["ids"].numel() > 900
    assert sorted(final["tables"][0]["ids"].tolist()) == sorted(touched[in_slots].tolist())
    assert final["tables"][0]["delta"] and src.ownership.frozen[slots].all()
    # an attempt other than the one that copied gets everything
    again = moves.export(src, slots, 2, 10)
    assert not again["tables"][0]["delta"]
    assert again["tables"][0]["ids"].numel() == copy["tables"][0]["ids"].numel()
    moves.install(dst, copy)


def _request(kind: str, seq: int, **body) -> ps_pb2.DataRequest:
    req = ps_pb2.DataRequest(client_id="c", seq=seq)
    getattr(req, kind).CopyFrom(body.pop("msg"))
    return req


def _push_rows(h: Handlers, seq: int, ids: torch.Tensor) -> ps_pb2.DataResponse:
    req = _request("push_rows", seq, msg=ps_pb2.PushRows(table="e"))
    reply = h.handle("push_rows", req, [as_buffer(ids), as_buffer(-torch.ones(ids.numel(), 4))])
    return ps_pb2.DataResponse.FromString(bytes(reply[0]))


def test_frozen_slots_refuse_writes_moved_ones_refuse_everything_and_retries_say_applied():
    src = _store(0, np.ones(SLOTS, bool))
    h = Handlers(src)
    ids = torch.arange(64)
    moving = row_slot(ids.numpy(), SLOTS) < 8
    staying = ids[~torch.from_numpy(moving)]
    assert _push_rows(h, 1, ids[torch.from_numpy(moving)]).code == 0
    moves.export(src, np.arange(8), 2)
    with pytest.raises(ServiceError) as refused:
        _push_rows(h, 2, ids[torch.from_numpy(moving)])
    assert (refused.value.code, refused.value.reason) == ("UNAVAILABLE", Reason.SLOT_MOVING)
    assert _push_rows(h, 3, staying).code == 0  # the other slots are not paused
    pull = h.handle("pull_rows", _request("pull_rows", 4, msg=ps_pb2.PullRows(table="e")),
                    [as_buffer(ids)])  # reads of frozen slots are served
    assert ps_pb2.DataResponse.FromString(bytes(pull[0])).code == 0
    # a retry of the first push while frozen is its stored answer, not a refusal
    assert _push_rows(h, 1, ids[torch.from_numpy(moving)]).push_rows.duplicate
    owned = np.ones(SLOTS, bool)
    owned[:8] = False
    moves.apply_layout(src, owned, 2)
    with pytest.raises(ServiceError) as wrong:
        _push_rows(h, 5, ids)
    assert wrong.value.reason == Reason.WRONG_OWNER and wrong.value.layout_version == 2
    retry = _push_rows(h, 1, ids[torch.from_numpy(moving)])  # applied before the move
    assert retry.reason == Reason.WRONG_OWNER and retry.push_rows.duplicate
    assert retry.layout_version == 2
    assert src.tables["e"].rows().keys() == set(staying.tolist())  # the moved rows left


def test_the_new_owner_applies_its_own_part_of_a_seq_the_old_owner_applied_before_the_move():
    """A call sends one (client, seq) to every PS, each its own part. The old owner applies its
    part, then hands slots over; the new owner's part of that seq, reaching it only after the
    hand-over was written (it waited for the import's exclusive gate), is applied there, not
    answered as a duplicate of the old owner's part (lost: when the marks moved with the
    slots, bench_resize saw rows and dense counters short by a push)."""
    half = np.arange(SLOTS) < SLOTS // 2
    src, dst = _store(0, half), _store(1, ~half)
    h_src, h_dst = Handlers(src), Handlers(dst)
    ids = torch.arange(400)
    theirs = torch.from_numpy(row_slot(ids.numpy(), SLOTS) >= SLOTS // 2)
    assert _push_rows(h_src, 5, ids[~theirs]).code == 0  # the old owner's part of seq 5
    names = [n for n in NAMES if tensor_slot(n, SLOTS) >= SLOTS // 2]
    assert names and src.push("c", 6, [(n, -torch.ones(3)) for n in NAMES
                                       if n not in names], [0] * (len(NAMES) - len(names)))
    _move(src, dst, np.arange(SLOTS // 4), 2)
    late = _push_rows(h_dst, 5, ids[theirs])  # the new owner's part of seq 5
    assert late.code == 0 and not late.push_rows.duplicate
    assert late.push_rows.rows == int(theirs.sum())
    rows = dst.tables["e"].rows()
    assert all(rows[i][2] == 1 for i in ids[theirs].tolist())  # each pushed once
    pushed = dst.push("c", 6, [(n, -torch.ones(3)) for n in names], [0] * len(names))
    assert not pushed["duplicate"] and all(dst.dense[n].version == 1 for n in names)
    # a retry of the old owner's part still comes back to it and is refused as applied there
    retry = _push_rows(h_src, 5, ids[~theirs])
    assert retry.reason == Reason.WRONG_OWNER and retry.push_rows.duplicate


def test_abort_thaws_the_old_owner_and_empties_the_new_one():
    src = _store(0, np.ones(SLOTS, bool))
    dst = _store(1, np.zeros(SLOTS, bool), init=False)
    _push_all(src, 1, torch.arange(300))
    before = _contents(src)
    slots = np.arange(0, 16)
    state = moves.export(src, slots, 2)
    moves.install(dst, state)
    assert len(dst.tables["e"]) > 0 and src.ownership.frozen_any
    assert moves.abort(src, slots)["thawed"] == 16 and not src.ownership.frozen_any
    freed = moves.abort(dst, slots)
    assert freed["rows_freed"] == int(state["tables"][0]["ids"].numel())
    assert len(dst.tables["e"]) == 0 and not dst.dense
    assert _contents(src)[0].keys() == before[0].keys()
    src.push_rows("c", 3, "e", torch.arange(300), -torch.ones(300, 4))  # writes go on


def test_slot_import_is_refused_from_the_network():
    dst = _store(1, np.zeros(SLOTS, bool), init=False)
    req = ps_pb2.DataRequest(slot_import=ps_pb2.SlotMove(slots=[1]))
    with pytest.raises(ServiceError, match="slot move"):
        Handlers(dst).handle("slot_import", req, [b"x"], req.SerializeToString())
    with pytest.raises(ServiceError, match="slot move"):  # whatever header it carries
        Handlers(dst).handle("slot_import", req, [b"x"], b"")
    with pytest.raises(ServiceError) as err:  # the named local call reads it: not an export
        Handlers(dst).import_slots(req, [b"x"])
    assert err.value.code == "INVALID_ARGUMENT"


def test_a_whole_pull_answers_only_owned_tensors_and_init_checks_slots():
    owned = np.zeros(SLOTS, bool)
    owned[: SLOTS // 2] = True
    s = _store(0, np.ones(SLOTS, bool))
    moves.apply_layout(s, owned, 2)
    mine = sorted(n for n in NAMES if tensor_slot(n, SLOTS) < SLOTS // 2)
    reply = Handlers(s).handle("pull", _request("pull", 1, msg=ps_pb2.Pull()), [])
    assert [m.name for m in ps_pb2.DataResponse.FromString(bytes(reply[0])).pull.tensors] == mine
    body = ps_pb2.InitParameters(optimizer=ps_pb2.OptimizerConfig(name="adagrad"))
    for n in NAMES:  # declaring a tensor of a slot it does not own
        body.tensors.append(meta_of(n, torch.zeros(3)))
    with pytest.raises(ServiceError) as wrong:
        Handlers(s).handle("init_parameters", _request("init_parameters", 2, msg=body),
                           [as_buffer(torch.zeros(3)) for _ in NAMES])
    assert wrong.value.reason == Reason.WRONG_OWNER


def test_a_nested_shared_hold_never_waits_for_a_waiting_writer():
    gate = Gate()
    inside = threading.Event()
    done = threading.Event()

    def reader():
        with gate.shared():
            inside.set()
            while not gate._waiting_exclusive:  # a writer queued behind this hold
                threading.Event().wait(0.001)
            with gate.shared():  # would deadlock without nesting
                done.set()

    t = threading.Thread(target=reader)
    t.start()
    inside.wait(5)
    with gate.exclusive():
        pass
    t.join(5)
    assert done.is_set() and not t.is_alive()


def test_a_move_into_a_table_that_must_grow_marks_its_rows_changed():
    src = _store(0, np.ones(SLOTS, bool))
    dst = _store(1, np.zeros(SLOTS, bool))  # a small table: the install grows it
    _push_all(src, 1, torch.arange(5000))
    slots = np.arange(SLOTS)
    moves.install(dst, _shipped(moves.export(src, slots, 2, 3, handover=False), dst))
    table = dst.tables["e"]
    assert len(table) == 5000 and table.dirty[: table.high].sum() == 5000


def test_the_ownership_check_forgets_what_it_cleared_when_slots_freeze_thaw_or_move():
    """Tensors once found owned and not frozen are checked as a set later: a freeze, a thaw
    or a new layout must make the next check look at their slots again."""
    name = NAMES[0]
    slot = tensor_slot(name, SLOTS)
    owned = np.zeros(SLOTS, dtype=bool)
    owned[slot] = True
    own = Ownership(0, owned, 1)
    assert own.check(tensors_w=[name], tensors_r=[name]) == ""  # now remembered as clear
    own.freeze(np.array([slot]))
    assert own.check(tensors_w=[name]) == f"tensor {name!r}"  # a write of a moving slot
    assert own.check(tensors_r=[name]) == ""  # reads are served
    own.thaw(np.array([slot]))
    assert own.check(tensors_w=[name]) == ""
    own.assign(np.zeros(SLOTS, dtype=bool), 2)
    with pytest.raises(ServiceError) as err:
        own.check(tensors_r=[name])
    assert err.value.reason == Reason.WRONG_OWNER


@pytest.mark.parametrize("committed", [True, False])
def test_a_move_written_here_survives_a_restart_until_the_layout_settles_it(tmp_path, committed):
    """The new owner's checkpoint holds what a move wrote there before the commit (the slots
    recorded as incoming): restarted from it, the master's first layout keeps them when the
    move committed and frees them when it rolled back, even at the version the file knew."""
    from ps.checkpoint import CheckpointDir, Checkpointer

    half = np.zeros(SLOTS, bool)
    half[: SLOTS // 2] = True
    src, dst = _store(0, half), _store(1, ~half)
    ids = torch.arange(200)
    _push_all(src, 1, ids[torch.from_numpy(half[row_slot(ids.numpy(), SLOTS)])])
    slots = np.arange(4)
    moves.install(dst, _shipped(moves.export(src, slots, 2, 7, handover=False), dst))
    moves.install(dst, _shipped(moves.export(src, slots, 2, 7), dst))
    wanted = {i: r for i, r in src.tables["e"].rows().items()
              if row_slot(np.array([i]), SLOTS)[0] < 4}
    assert wanted and dst.ownership.incoming[slots].all()
    Checkpointer(dst, CheckpointDir(tmp_path, 1, 2, 3)).write(delta=True)
    again = ParamStore(index=1, num_ps=2)
    Checkpointer(again, CheckpointDir(tmp_path, 1, 2, 3)).restore()
    assert again.ownership.incoming[slots].all() and again.ownership.settle
    owned = ~half
    if committed:
        owned[slots] = True
    moves.apply_layout(again, owned, 2 if committed else 1)
    held = again.tables["e"].rows()
    if committed:
        assert {i: held[i][0].tolist() for i in wanted} == {
            i: r[0].tolist() for i, r in wanted.items()}
    else:
        assert not set(wanted) & set(held)
    assert not again.ownership.incoming.any() and not again.ownership.settle


def test_a_tables_cap_follows_the_slots_owned_across_layouts():
    """max_rows is re-split by the slots a PS owns whenever its layout changes: a PS that
    gives slots away gets a smaller share (and evicts down to it at once), one that takes
    slots a larger one, so the rows over all PS stay within max_rows plus the PS count."""
    half = np.zeros(SLOTS, bool)
    half[: SLOTS // 2] = True
    s = ParamStore(index=0, num_ps=2)
    s.ownership = Ownership(0, half, 1)
    s.init_parameters([("t0", torch.zeros(3))], ADAGRAD,
                      [(TableSpec("e", 4, initializer="zeros", max_rows=300), None)])
    table = s.tables["e"]
    assert table.row_cap == 150
    ids = torch.arange(5000)
    mine = ids[torch.from_numpy(half[row_slot(ids.numpy(), SLOTS)])][:150]
    s.pull_rows("e", mine)
    assert len(table) == 150
    third = half.copy()
    third[SLOTS // 3 + 1:] = False  # a grow to 3: it keeps a third of the slots
    moves.apply_layout(s, third, 2)
    assert table.row_cap == -(-300 * int(third.sum()) // SLOTS) == 104  # 22 of 64 slots
    kept = int(third[row_slot(mine.numpy(), SLOTS)].sum())  # rows of the slots it keeps
    assert kept > 104 and len(table) <= table.row_cap  # evicted down at once, cause cap
    assert sum(table.evicted.values()) >= kept - 104
    moves.apply_layout(s, np.ones(SLOTS, bool), 3)  # a shrink to 1: the whole cap
    assert table.row_cap == 300
    empty = np.zeros(SLOTS, bool)
    assert Ownership(0, empty, 1).row_share(300) == 1 and Ownership(0, empty).row_share(0) == 0
