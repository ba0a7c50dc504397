"""ElasticDataset in this process against a real master: epochs, batches, shuffle, DataLoader."""
from __future__ import annotations

import collections

import pytest
import torch
from torch.utils.data import DataLoader

from worker_sdk import DatasetSpecMismatch, ElasticDataset, MasterUnavailable
from worker_sdk.data.record_order import ShardLayout

pytestmark = pytest.mark.timeout(60)


def _ds(master, data, **kw):
    kw.setdefault("handle_sigterm", False)
    return ElasticDataset(data, master=master.address, **kw)


def _epochs(master, name):
    return {e.epoch: e for e in master.dataset(name).epochs}


def test_two_epochs_one_worker_every_record_counted_once(master):
    data = list(range(50))
    ds = _ds(master, data, name="two", shard_size=8, num_epochs=2)
    seen = list(ds)
    assert collections.Counter(seen) == {i: 2 for i in data}
    status = master.dataset("two")
    assert status.finished
    epochs = _epochs(master, "two")
    assert sorted(epochs) == [0, 1]
    for e in epochs.values():
        assert e.records_done == 50 and e.finished and e.duplicates == 0
        assert e.handouts == 7  # ceil(50 / 8): each shard handed out once
    left = [ev for ev in master.events() if ev.kind == "worker_left"]
    assert [ev.cause for ev in left] == ["finished"]
    assert ds.stats()["leases_completed"] == 14
    ds.close()  # idempotent after the finish
    assert list(ds) == []  # the dataset ended: a new pass yields nothing


def test_batches_collate_like_a_dataloader(master):
    data = [(torch.full((3,), float(i)), i) for i in range(10)]
    ds = _ds(master, data, name="coll", shard_size=4)
    batches = list(ds.batches(batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    assert [b[1].dtype for b in batches] == [torch.int64] * 3
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == list(range(10))
    assert torch.equal(batches[0][0][:, 0].long(), batches[0][1])
    assert master.dataset("coll").epochs[0].records_done == 10


def test_batches_drop_last_skips_the_short_batch_but_the_job_ends(master):
    ds = _ds(master, list(range(10)), name="drop", shard_size=4)
    batches = list(ds.batches(batch_size=4, drop_last=True))
    assert [len(b) for b in batches] == [4, 4]
    assert master.dataset("drop").epochs[0].records_done == 10
    assert master.dataset("drop").finished


def test_shuffle_is_deterministic_and_a_remainder_yields_exactly_the_untrained(master):
    n, size = 40, 10
    layout = ShardLayout(n, size, shuffle=True, seed=5)
    again = ShardLayout(n, size, shuffle=True, seed=5)
    shard2 = [layout.record(0, 2, 20, k) for k in range(10)]
    assert shard2 == [again.record(0, 2, 20, k) for k in range(10)]
    assert sorted(shard2) == list(range(20, 30)) and shard2 != list(range(20, 30))
    assert shard2 != [layout.record(1, 2, 20, k) for k in range(10)]  # epoch changes it

    # worker A trains 3 records of its first lease, then closes: the master keeps offset 3
    a = _ds(master, list(range(n)), name="shuf", shard_size=size, shuffle=True, seed=5,
            max_shards=1, ack="push", worker_name="a")
    it = iter(a)
    first = [next(it) for _ in range(3)]
    (lease,) = a.table.leases.values()
    a.mark_trained()
    a.close()
    shard = lease.index
    start = shard * size
    expect = [layout.record(0, shard, start, k) for k in range(size)]
    assert first == expect[:3]
    requeued = master.dataset("shuf").epochs[0]
    assert requeued.records_done == 3 and requeued.requeues["closed"] == 1

    # worker B gets the remainder [start + 3, end) first (front of TODO) and reads the rest
    b = _ds(master, list(range(n)), name="shuf", shard_size=size, shuffle=True, seed=5,
            max_shards=1, worker_name="b")
    rest = list(b)
    assert rest[:size - 3] == expect[3:]
    assert collections.Counter(first + rest) == {i: 1 for i in range(n)}
    e = master.dataset("shuf").epochs[0]
    # the remainder is handed out again, but A left with its exact offset: nothing is redone
    assert e.records_done == n and e.records_rehanded == size - 3 and e.records_redone == 0


def test_dataloader_with_num_workers_0_acknowledges_whole_batches(master):
    ds = _ds(master, list(range(12)), name="dl", shard_size=6, samples_per_step=4)
    loader = DataLoader(ds, batch_size=4)
    it = iter(loader)
    first = next(it)
    assert first.tolist() == [0, 1, 2, 3]
    assert ds.table.in_flight() == 4  # the step has not finished yet
    second = next(it)  # asking for batch 2: batch 1's step finished
    assert second.tolist() == [4, 5, 6, 7]
    assert sum(lease.trained for lease in ds.table.leases.values()) + 6 * ds.table.completed >= 4
    assert ds.table.in_flight() == 4
    rest = list(it)
    assert [b.tolist() for b in rest] == [[8, 9, 10, 11]]
    ds.close()
    assert master.dataset("dl").epochs[0].records_done == 12


def test_dataloader_worker_processes_are_refused(master):
    ds = _ds(master, list(range(12)), name="dlw", shard_size=6)
    with pytest.raises(RuntimeError, match="num_workers"):
        list(DataLoader(ds, batch_size=4, num_workers=2))
    ds.close()
    assert master.dataset("dlw").epochs[0].records_done == 0


def test_a_different_spec_under_the_same_name_is_a_clear_error(master):
    a = _ds(master, list(range(20)), name="spec", shard_size=8)
    again = _ds(master, list(range(20)), name="spec", shard_size=8)  # same spec: fine
    with pytest.raises(DatasetSpecMismatch, match="shard_size=8"):
        _ds(master, list(range(20)), name="spec", shard_size=16)
    a.close()
    again.close()


def test_push_mode_reports_nothing_until_marked(master):
    ds = _ds(master, list(range(8)), name="push", shard_size=4, ack="push", max_shards=1)
    it = iter(ds)
    got = [next(it) for _ in range(4)]
    assert got == [0, 1, 2, 3]
    ds.client.heartbeat()
    assert master.dataset("push").epochs[0].records_done == 0  # delivered, not trained
    (lease,) = ds.table.leases.values()
    assert lease.reported == 0 and lease.delivered == 4
    ds.mark_trained()
    assert next(it) == 4  # the GetShard for the next lease carries the DONE
    assert master.dataset("push").epochs[0].records_done == 4
    ds.close()


def test_steady_state_is_one_get_shard_call_per_max_shards_leases(master):
    ds = _ds(master, list(range(40)), name="calls", shard_size=4, max_shards=2)
    calls = []
    get_shard = ds.client.get_shard
    ds.client.get_shard = lambda *a, **kw: calls.append(1) or get_shard(*a, **kw)
    assert len(list(ds)) == 40
    assert len(calls) == 10 // 2 + 1  # five calls of two leases each, then END
    assert master.dataset("calls").epochs[0].records_done == 40


def test_a_failed_step_is_reported_and_a_poison_shard_quarantined(master):
    ds = _ds(master, list(range(12)), name="poison", shard_size=4, max_shards=1)
    trained = []
    for x in ds:
        if x == 5:
            ds.mark_failed("record 5 is poison")
            continue
        trained.append(x)
    status = master.dataset("poison")
    (q,) = status.quarantined
    assert (q.shard.index, q.shard.start, q.shard.end, q.failures) == (1, 5, 8, 3)
    assert list(q.errors) == ["record 5 is poison"] * 3
    assert status.epochs[0].records_done == 9 and status.epochs[0].finished
    assert sorted(trained) == [0, 1, 2, 3, 4, 8, 9, 10, 11]


def test_closing_after_an_error_does_not_acknowledge_the_step_in_flight(master):
    ds = _ds(master, list(range(12)), name="err", shard_size=6, samples_per_step=5)
    batches = list(DataLoader(ds, batch_size=5))  # the pass ends mid-batch: [10, 11] in flight
    assert [len(b) for b in batches] == [5, 5, 2]
    ds.close(error=True)  # e.g. the last step raised
    epoch = master.dataset("err").epochs[0]
    assert epoch.records_done == 10 and epoch.requeues["error"] == 1


def test_an_unreachable_master_is_retried_then_reported_clearly():
    with pytest.raises(MasterUnavailable, match="did not answer CreateDataset"):
        ElasticDataset(list(range(4)), master="127.0.0.1:9", retry_timeout_s=0.5,
                       handle_sigterm=False)


def test_samples_per_step_below_one_is_refused_before_the_master_is_called():
    with pytest.raises(ValueError, match="samples_per_step must be >= 1"):
        ElasticDataset(list(range(4)), master="127.0.0.1:9", samples_per_step=0,
                       handle_sigterm=False)
