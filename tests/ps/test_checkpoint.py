"""Checkpoint files: atomic, verified, newest good one restored, damaged ones refused."""
from __future__ import annotations

import io
import logging

import pytest
import torch

from ps.checkpoint import (CheckpointDir, Checkpointer, CorruptCheckpoint, OtherPSCount, decode,
                           encode)
from ps.embedding import TableSpec
from ps.optim import make_config
from ps.params import ParamStore


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


def test_only_this_ps_and_count_files_are_used(tmp_path, caplog):
    other = ParamStore(index=1, num_ps=2)
    other.init_parameters([("x", torch.ones(1))], make_config("sgd"))
    CheckpointDir(tmp_path, 1, 2).write(other.snapshot(), 1)
    CheckpointDir(tmp_path, 0, 3).write(ParamStore(index=0, num_ps=3).snapshot(), 1)
    (tmp_path / ".ps-0-of-2-00000009.ckpt.tmp-123").write_bytes(b"half")
    fresh = ParamStore(index=0, num_ps=2)
    # only another count's checkpoint of this index: starting empty would let the next
    # init_parameters replace a trained model, so the PS refuses (issue 17)
    with pytest.raises(OtherPSCount, match="--num-ps"):
        Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2)).restore()
    assert not fresh.initialized
    assert not list(tmp_path.glob(".ps-0-of-2-*"))  # the half-written file was cleaned
    # with a checkpoint of its own count as well, that one is used and the others ignored
    mine = ParamStore(index=0, num_ps=2)
    mine.init_parameters([("y", torch.ones(1))], make_config("sgd"))
    CheckpointDir(tmp_path, 0, 2).write(mine.snapshot(), 1)
    with caplog.at_level(logging.WARNING):
        assert Checkpointer(fresh, CheckpointDir(tmp_path, 0, 2)).restore() is not None
    assert fresh.initialized
    assert "another PS count" in caplog.text


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
