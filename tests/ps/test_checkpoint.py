"""Checkpoint files: atomic, verified, newest good one restored, damaged ones refused."""
from __future__ import annotations

import io
import logging

import pytest
import torch

from ps.checkpoint import (CheckpointDir, Checkpointer, CorruptCheckpoint, decode,
                           encode)
from pswire.tables import TableSpec
from pswire.optimizers import make_config
from ps.store.params import ParamStore


def _store(value: float = 0.0) -> ParamStore:
    s = ParamStore(index=0, num_ps=2)
    s.init_parameters([("w", torch.full((3,), value))], make_config("adagrad", lr=0.1),
                      [(TableSpec("e", 2, seed=1), None)])
    return s


def _bytes(state) -> bytes:
    buf = io.BytesIO()
    encode(state, buf)
    return buf.getvalue()


def test_encode_decode_round_trip():
    state = _store().snapshot()
    back = decode(_bytes(state))
    assert torch.equal(back["dense"][0]["value"], state["dense"][0]["value"])


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty"])
def test_damaged_files_are_recognized(damage):
    data = bytearray(_bytes(_store().snapshot()))
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "header":
        data[:4] = b"JUNK"
    else:
        data = bytearray()
    with pytest.raises(CorruptCheckpoint):
        decode(bytes(data))


def test_newest_good_checkpoint_restored_and_old_ones_pruned(tmp_path):
    store = _store()
    ck = Checkpointer(store, CheckpointDir(tmp_path, 0, 2, keep=2))
    ck.restore()
    for seq in range(1, 4):
        store.push("c", seq, [("w", torch.ones(3))], [0])
        ck.write()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ps-0-of-2-00000002.ckpt", "ps-0-of-2-00000003.ckpt"]
    fresh = ParamStore(index=0, num_ps=2)
    info = Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2)).restore()
    assert info.number == 3 and fresh.versions() == {"w": 3}
    assert torch.equal(fresh.dense["w"].value, store.dense["w"].value)


def test_corrupt_newest_is_refused_and_the_previous_used(tmp_path, caplog):
    store = _store()
    ck = Checkpointer(store, CheckpointDir(tmp_path, 0, 2))
    ck.restore()
    store.push("c", 1, [("w", torch.ones(3))], [0])
    ck.write()
    store.push("c", 2, [("w", torch.ones(3))], [1])
    newest = ck.write().path
    newest.write_bytes(newest.read_bytes()[:-100])  # a torn write
    fresh = ParamStore(index=0, num_ps=2)
    with caplog.at_level(logging.ERROR):
        info = Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2)).restore()
    assert info.number == 1 and fresh.versions() == {"w": 1}
    assert "refusing checkpoint ps-0-of-2-00000002.ckpt" in caplog.text
    assert (tmp_path / "ps-0-of-2-00000002.ckpt.corrupt").exists()
    # the next checkpoint does not reuse the refused number
    assert Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2)).restore().number == 1


def test_this_index_files_of_any_count_are_used_through_their_slots(tmp_path):
    """A checkpoint records the hash slots it holds, so a PS set restarted with another count
    (after `resize-ps`) restores its index's newest file whatever count wrote it; another
    index's files are never read."""
    other = ParamStore(index=1, num_ps=2)
    other.init_parameters([("x", torch.ones(1))], make_config("sgd"))
    CheckpointDir(tmp_path, 1, 2).write(other.snapshot(), 5)
    (tmp_path / ".ps-0-of-2-00000009.ckpt.tmp-123").write_bytes(b"half")
    old = ParamStore(index=0, num_ps=3)
    old.init_parameters([("y", torch.ones(1))], make_config("sgd"))
    CheckpointDir(tmp_path, 0, 3).write(old.snapshot(), 1)
    older = ParamStore(index=0, num_ps=2)
    older.init_parameters([("z", torch.ones(1))], make_config("sgd"))
    CheckpointDir(tmp_path, 0, 2).write(older.snapshot(), 0)
    fresh = ParamStore(index=0, num_ps=2)
    ck = Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2))
    assert ck.restore() is not None
    assert not list(tmp_path.glob(".ps-0-of-*"))  # the half-written file was cleaned
    # the newest of index 0 (written by PS 0 of 3), with the slots PS 0 of 3 held
    assert set(fresh.dense) == {"y"}
    assert fresh.ownership.owned.sum() == old.ownership.owned.sum() == 342
    assert ck.write().number == 2  # numbering goes on after every file of the index


def test_periodic_write_skips_when_nothing_changed(tmp_path):
    store = ParamStore(index=0, num_ps=2)
    ck = Checkpointer(store, CheckpointDir(tmp_path, 0, 2))
    ck.restore()
    assert ck.write(only_if_changed=True) is None  # fresh and empty: nothing to keep
    store.init_parameters([], make_config("sgd"), [(TableSpec("e", 2, seed=1), None)])
    assert ck.write(only_if_changed=True) is not None
    assert ck.write(only_if_changed=True) is None
    store.push_rows("c", 1, "e", torch.tensor([2]), torch.ones(1, 2))
    assert ck.write(only_if_changed=True) is not None


def _adagrad_store() -> ParamStore:
    s = ParamStore()
    s.init_parameters([("w", torch.zeros(1000))], make_config("adagrad", lr=0.1),
                      [(TableSpec("e", 4, seed=3), None)])
    s.push("c", 1, [("w", torch.ones(1000))], [0])
    s.push_rows("c", 2, "e", torch.arange(10), torch.ones(10, 4))
    return s


def test_a_snapshot_copies_nothing_and_pushes_during_it_copy_on_write():
    """A checkpoint's snapshot takes references under the gate (no copy: it used to clone
    every tensor under its lock, stalling pulls); a push while it is open changes a copy."""
    s = _adagrad_store()
    before = s.snapshot()  # a self-contained copy, for comparing
    with s.snapshot_view() as view:
        w, e = view["dense"][0], view["tables"][0]
        assert w["value"].data_ptr() == s.dense["w"].value.data_ptr()  # a view, no copy
        assert e["weights"].data_ptr() == s.tables["e"].weights.data_ptr()
        s.push("c", 3, [("w", torch.ones(1000))], [1])
        s.push_rows("c", 4, "e", torch.arange(20), torch.ones(20, 4))
        s.pull(["w"])  # pulls never wait for a snapshot
        assert s.dense["w"].value.data_ptr() != w["value"].data_ptr()
        # the view still holds the state at the snapshot, optimizer state included
        assert torch.equal(w["value"], before["dense"][0]["value"])
        assert torch.equal(w["optim"]["state"][0]["sum"], before["dense"][0]["optim"]["state"][0]["sum"])
        assert torch.equal(e["weights"], before["tables"][0]["weights"])
        assert torch.equal(e["accum"], before["tables"][0]["accum"])
        restored = ParamStore()
        restored.restore(decode(_bytes(view)))
    assert s.stats.snapshot_copies == 1
    s.push("c", 5, [("w", torch.ones(1000))], [2])  # the view is closed: no more copies
    assert s.stats.snapshot_copies == 1
    assert restored.versions() == {"w": 1} and len(restored.tables["e"]) == 10
    assert torch.equal(restored.dense["w"].value, before["dense"][0]["value"])


def test_restore_adopts_the_loaded_rows_without_another_copy(tmp_path):
    s = _adagrad_store()
    ck = Checkpointer(s, CheckpointDir(tmp_path, 0, 1))
    ck.restore()
    ck.write()
    state = CheckpointDir(tmp_path, 0, 1).load_newest()[0]
    fresh = ParamStore()
    fresh.restore(state)
    assert fresh.tables["e"].weights.data_ptr() == state["tables"][0]["weights"].data_ptr()
    assert torch.equal(fresh.tables["e"].weights, s.tables["e"].weights[:10])
    # it grows as before when new rows come
    rows, created = fresh.pull_rows("e", torch.arange(5, 2000))
    assert created == 1990 and torch.equal(rows[:5], s.tables["e"].weights[5:10])


def test_files_of_format_1_are_still_read(tmp_path):
    import hashlib
    import struct

    from ps.checkpoint import MAGIC, TRAILER_MAGIC

    state = _adagrad_store().snapshot()
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    old = MAGIC + payload + TRAILER_MAGIC + struct.pack("<Q", len(payload)) + \
        hashlib.sha256(payload).digest()
    back = decode(old)
    assert torch.equal(back["dense"][0]["value"], state["dense"][0]["value"])


def test_overlapping_snapshot_views_each_keep_their_state():
    """A checkpoint and a backup's copy may overlap: closing one view must not unprotect the
    other."""
    s = _adagrad_store()
    before = s.snapshot()
    with s.snapshot_view() as first:
        with s.snapshot_view():
            pass  # the second view closes first
        s.push("c", 3, [("w", torch.ones(1000))], [1])
        s.push_rows("c", 4, "e", torch.arange(10), torch.ones(10, 4))
        assert torch.equal(first["dense"][0]["value"], before["dense"][0]["value"])
        assert torch.equal(first["dense"][0]["optim"]["state"][0]["sum"],
                           before["dense"][0]["optim"]["state"][0]["sum"])
        assert torch.equal(first["tables"][0]["weights"], before["tables"][0]["weights"])
