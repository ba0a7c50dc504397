"""Delta checkpoints: restore = newest full + its deltas, equal to the live store; a SIGKILL
while a delta is written loses nothing that was in the previous file."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

from ps.checkpoint import CheckpointDir, Checkpointer
from pswire.tables import TableSpec
from pswire.optimizers import make_config
from ps.store.params import ParamStore
from ps.store.tables.eviction import Cause

ROOT = Path(__file__).resolve().parents[2]


def _store(**kw) -> ParamStore:
    store = ParamStore()
    store.init_parameters([("w", torch.zeros(3))], make_config("adagrad", lr=0.1),
                          [(TableSpec("emb", 4, seed=2, **kw), None)])
    return store


def _traffic(store: ParamStore, seq: int, rng, n: int = 5) -> int:
    for _ in range(n):
        seq += 1
        ids = torch.from_numpy(np.unique(rng.zipf(1.2, 32) % 500))
        store.pull_rows("emb", ids)
        store.push_rows("c", seq, "emb", ids, torch.ones(ids.numel(), 4))
        seq += 1
        store.push("c", seq, [("w", torch.ones(3))], [0])
    return seq


def _same(a: ParamStore, b: ParamStore) -> None:
    ta, tb = a.tables["emb"], b.tables["emb"]
    ra, rb = ta.rows(), tb.rows()
    assert ra.keys() == rb.keys()
    for k in ra:
        assert torch.equal(ra[k][0], rb[k][0]) and torch.equal(ra[k][1], rb[k][1])
        assert ra[k][2:] == rb[k][2:]
    assert (ta.pushes, ta.admitted, ta.filtered, ta.evicted) == \
        (tb.pushes, tb.admitted, tb.filtered, tb.evicted)
    assert (ta.sketch is None) == (tb.sketch is None)
    if ta.sketch is not None:
        assert np.array_equal(ta.sketch.counters, tb.sketch.counters)
        assert (ta.sketch.sightings, ta.sketch.halvings) == \
            (tb.sketch.sightings, tb.sketch.halvings)
    assert torch.equal(a.dense["w"].value, b.dense["w"].value)
    assert a.applied.export() == b.applied.export()


def test_restore_from_full_plus_deltas_equals_the_live_store(tmp_path):
    live = _store(max_rows=200, ttl_steps=40, admit_after=2)
    cp = Checkpointer(live, CheckpointDir(tmp_path, 0, 1))
    rng = np.random.default_rng(0)
    seq = _traffic(live, 0, rng)
    assert not cp.write(delta=True).delta  # no full to chain to yet: a full one
    for _ in range(4):
        seq = _traffic(live, seq, rng)
        assert cp.write(delta=True).delta
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "ps-0-of-1-00000001.ckpt"
    assert names[1:] == [f"ps-0-of-1-0000000{n}-base-00000001.delta" for n in range(2, 6)]
    restored = ParamStore()
    again = Checkpointer(restored, CheckpointDir(tmp_path, 0, 1))
    info = again.restore()
    assert info.number == 5 and info.delta
    _same(restored, live)
    # and the chain goes on from there: its next delta is number 6 on base 1
    _traffic(restored, seq, rng)
    assert again.write(delta=True).path.name == "ps-0-of-1-00000006-base-00000001.delta"


def test_a_delta_is_small_next_to_a_full_checkpoint(tmp_path):
    store = _store()
    store.pull_rows("emb", torch.arange(20_000))
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    full = cp.write()
    store.push_rows("c", 1, "emb", torch.arange(0, 20_000, 100), torch.ones(200, 4))  # 1 %
    delta = cp.write(delta=True)
    assert delta.delta and delta.bytes < 0.05 * full.bytes


def test_deltas_fold_into_the_next_full_and_are_pruned_with_it(tmp_path):
    store = _store()
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1, keep=1))
    rng = np.random.default_rng(1)
    seq = _traffic(store, 0, rng)
    cp.write()
    for _ in range(2):
        seq = _traffic(store, seq, rng)
        cp.write(delta=True)
    seq = _traffic(store, seq, rng)
    cp.write()  # full: holds everything the deltas held, which go with their full
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ps-0-of-1-00000004.ckpt"]
    restored = ParamStore()
    Checkpointer(restored, CheckpointDir(tmp_path, 0, 1)).restore()
    _same(restored, store)


def test_a_bad_delta_ends_the_chain_and_the_next_file_is_full(tmp_path):
    store = _store()
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    rng = np.random.default_rng(2)
    seq = _traffic(store, 0, rng)
    cp.write()
    seq = _traffic(store, seq, rng)
    kept = ParamStore()
    kept.restore(store.snapshot())
    second = cp.write(delta=True).path
    seq = _traffic(store, seq, rng)
    third = cp.write(delta=True).path
    seq = _traffic(store, seq, rng)
    cp.write(delta=True)
    data = bytearray(third.read_bytes())
    data[len(data) // 2] ^= 0xFF
    third.write_bytes(bytes(data))
    restored = ParamStore()
    again = Checkpointer(restored, CheckpointDir(tmp_path, 0, 1))
    assert again.restore().path == second
    _same(restored, kept)
    assert not any(p.suffix == ".delta" and p.name > second.name for p in tmp_path.iterdir())
    assert not again.write(delta=True).delta


CHILD = textwrap.dedent("""
    import sys, numpy as np, torch
    from ps.checkpoint import CheckpointDir, Checkpointer
    from pswire.tables import TableSpec
    from pswire.optimizers import make_config
    from ps.store.params import ParamStore

    def step_ids(k):
        return torch.from_numpy(np.unique(np.random.default_rng(k).integers(0, 50_000, 8_000)))

    store = ParamStore()
    store.init_parameters([("w", torch.zeros(3))], make_config("sgd", lr=0.1),
                          [(TableSpec("emb", 16, seed=5), None)])
    cp = Checkpointer(store, CheckpointDir(sys.argv[1], 0, 1, keep=2))
    cp.restore()
    k = store.tables["emb"].pushes
    cp.write()
    while True:
        k += 1
        ids = step_ids(k)
        store.pull_rows("emb", ids)
        store.push_rows("c", k, "emb", ids, torch.full((ids.numel(), 16), 0.01))
        print("writing", k, flush=True)
        cp.write(delta=True)
""")


def _replay(pushes: int) -> ParamStore:
    store = ParamStore()
    store.init_parameters([("w", torch.zeros(3))], make_config("sgd", lr=0.1),
                          [(TableSpec("emb", 16, seed=5), None)])
    for k in range(1, pushes + 1):
        ids = torch.from_numpy(np.unique(np.random.default_rng(k).integers(0, 50_000, 8_000)))
        store.pull_rows("emb", ids)
        store.push_rows("c", k, "emb", ids, torch.full((ids.numel(), 16), 0.01))
    return store


def test_sigkill_while_a_delta_is_written_loses_nothing_of_the_previous_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = np.random.default_rng(7)
    for round_ in range(2):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT,
                                 env=env, stdout=subprocess.PIPE, text=True)
        target = int(rng.integers(3, 7))
        try:
            while True:
                line = child.stdout.readline()
                assert line, "the child ended early"
                k = int(line.split()[1])
                if k >= target + round_ * 4:
                    break  # it is writing delta k now: kill it in the middle
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        restored = ParamStore()
        Checkpointer(restored, CheckpointDir(tmp_path, 0, 1, keep=2)).restore()
        pushes = restored.tables["emb"].pushes
        assert pushes >= k - 1  # the file before the one being written is all there
        replay = _replay(pushes)
        assert _by_id(restored) == _by_id(replay)


def _by_id(store: ParamStore):
    state = store.tables["emb"].export()
    live = state["ids"] >= 0
    ids, order = torch.sort(state["ids"][live])
    return ids.tolist(), state["weights"][live][order].numpy().tobytes(), \
        state["counts"][live][order].tolist()


def test_evictions_past_the_table_size_still_make_a_small_delta(tmp_path):
    """A small capped table churning many times its size between files: only the rows that
    changed and the filed ids that left are in the delta (a row that came and went between
    two files is in neither), and base + delta restore it exactly."""
    store = _store(max_rows=2000, evict="lfu")
    kept = torch.arange(100_000, 101_500)
    for _ in range(3):  # counted often: LFU keeps them through the churn below
        store.pull_rows("emb", kept)
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    full = cp.write()
    for start in range(0, 20_000, 500):  # ~20,000 rows evicted, ten times the cap
        store.pull_rows("emb", torch.arange(start, start + 500))
    table = store.tables["emb"]
    assert table.evicted[Cause.CAP] > 10 * 2000 - 2000 and len(table) == 2000
    info = cp.write(delta=True)
    assert info.delta and info.bytes < 0.4 * full.bytes + 12_000  # 500 of 2000 rows changed
    restored = ParamStore()
    Checkpointer(restored, CheckpointDir(tmp_path, 0, 1)).restore()
    _same(restored, store)


def test_a_sketch_rides_in_a_delta_only_as_its_changed_counters(tmp_path):
    """admit_after > 1: the 2 MiB admission sketch is whole in a full file; a delta carries
    only the counters changed since, and base + deltas restore it exactly."""
    store = _store(admit_after=3)
    sketch = store.tables["emb"].sketch
    for _ in range(3):
        store.pull_rows("emb", torch.arange(5_000))  # 5,000 rows, admitted at the third
    store.pull_rows("emb", torch.arange(5_000, 15_000))  # seen once: only in the sketch
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    full = cp.write()
    assert full.bytes > sketch.counters.nbytes
    sizes = []
    for k in range(3):
        ids = torch.arange(0, 5_000, 50)  # 100 rows changed, 200 new ids sighted
        store.push_rows("c", k + 1, "emb", ids, torch.ones(100, 4))
        store.pull_rows("emb", torch.arange(20_000 + 200 * k, 20_200 + 200 * k))
        info = cp.write(delta=True)
        assert info.delta
        sizes.append(info.bytes)
    # 100 rows (~6 KiB), 200 ids' counters (<= 800 x 6 bytes), the dense part and the rest
    assert max(sizes) < 0.02 * full.bytes and max(sizes) < sketch.counters.nbytes // 50
    restored = ParamStore()
    Checkpointer(restored, CheckpointDir(tmp_path, 0, 1)).restore()
    _same(restored, store)


def test_a_full_file_where_a_delta_was_asked_says_why_in_one_line(tmp_path, caplog):
    store = _store()
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    with caplog.at_level(logging.INFO, logger="ps.checkpoint"):
        store.pull_rows("emb", torch.arange(100))
        first = cp.write(delta=True)
        store.pull_rows("emb", torch.arange(300))  # every row changed since, and more rows
        second = cp.write(delta=True)
        store.push_rows("c", 1, "emb", torch.arange(3), torch.ones(3, 4))
        third = cp.write(delta=True)
    assert (first.delta, second.delta, third.delta) == (False, False, True)
    lines = [r.getMessage() for r in caplog.records if r.name == "ps.checkpoint"]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert "full, not a delta: no full checkpoint was written or restored yet" in lines[0]
    assert "full, not a delta: the tables' changes since the last file" in lines[1]
    assert "not a delta" not in lines[2]


def test_a_bounded_tables_reads_wait_for_a_snapshot_and_pulls_only_of_others_do_not(tmp_path):
    """Reads that change a bounded table (admission, evictions, touches) hold the gate shared
    like a push, so a checkpoint's view, its delta and the table's clean mark see each one
    whole (one landing between the delta and the mark would be in no file); reads of an
    unbounded table change nothing a file holds and never wait."""
    import threading

    bounded = _store(admit_after=2)
    plain = _store()
    for store, waits in ((bounded, True), (plain, False)):
        done = threading.Event()
        with store.gate.exclusive():  # what a snapshot view holds while it is taken
            t = threading.Thread(target=lambda: (store.pull_rows("emb", torch.arange(4)),
                                                 done.set()))
            t.start()
            assert done.wait(0.3) is not waits
        t.join(5)
        assert done.is_set()
    # a checkpoint notices reads that change a bounded table: they are something to write
    cp = Checkpointer(bounded, CheckpointDir(tmp_path, 0, 1))
    before = cp._mutations()
    bounded.pull_rows("emb", torch.arange(8, 12))
    assert cp._mutations() > before
