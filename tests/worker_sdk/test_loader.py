"""ds.loader(): a real DataLoader with worker processes; the main process leases, the workers
only read; batches are a plain read of the leased ranges; prefetched batches are never
acknowledged."""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import torch

from tests.worker_sdk.local_master import LocalMaster
from worker_sdk import ElasticDataset, MasterClient
from worker_sdk.data.master_client import MasterClient as _MC
from worker_sdk.data.readers import ArrayReader, read_batch

pytestmark = pytest.mark.timeout(120)


class PidLoggingReader(ArrayReader):
    """An ArrayReader that notes which process read each range."""

    def __init__(self, log, *arrays):
        super().__init__(*arrays)
        self.log = str(log)

    def _note(self):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")

    def read(self, start, end):
        self._note()
        return super().read(start, end)

    def take(self, index):
        self._note()
        return super().take(index)


def _ds(master, data, **kw):
    client = MasterClient(name="loader", heartbeat=False, stub=master.stub())
    return ElasticDataset(data, master=client, handle_sigterm=False, **kw)


def test_loader_workers_only_read_and_batches_equal_a_plain_read(tmp_path, monkeypatch):
    calls = tmp_path / "master-calls"
    real_call = _MC._call

    def logged_call(self, *args, **kw):  # inherited by forked workers: any call is noted
        with open(calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real_call(self, *args, **kw)

    monkeypatch.setattr(_MC, "_call", logged_call)
    n = 600
    x = torch.arange(n)
    reads = tmp_path / "reads"
    reader = PidLoggingReader(reads, x, x.float() * 0.5)
    master = LocalMaster()
    ds = _ds(master, reader, name="l", shard_size=50, num_epochs=2, shuffle=True, seed=4,
             ack="next")
    delivered = []
    deliver = ds.stream.deliver
    ds.stream.deliver = lambda pieces: delivered.append(list(pieces)) or deliver(pieces)
    seen = []
    for ids, half in ds.loader(32, num_workers=2, prefetch_factor=2):
        pieces = delivered[-1]
        plain = read_batch(ArrayReader(x, x.float() * 0.5), [ds.stream.records(p)
                                                             for p in pieces])
        assert torch.equal(ids, plain[0]) and torch.equal(half, plain[1])
        seen += ids.tolist()
    ds.close()
    assert collections.Counter(seen) == {i: 2 for i in range(n)}
    assert [e.records_done for e in master.epochs("l").values()] == [n, n]
    readers_pids = set(map(int, reads.read_text().split()))
    callers = set(map(int, calls.read_text().split()))
    assert os.getpid() not in readers_pids and len(readers_pids) == 2  # the workers read
    assert callers == {os.getpid()}  # only the main process talked to the master


def test_prefetched_batches_are_not_acknowledged_and_go_back_with_exact_offsets():
    master = LocalMaster()
    x = torch.arange(400)
    ds = _ds(master, x, name="p", shard_size=100, max_shards=2, ack="push")
    it = iter(ds.loader(30, num_workers=2, prefetch_factor=2))
    first = [next(it) for _ in range(2)]
    ds.mark_trained()  # the two batches' steps finished (as a push would say)
    third = next(it)  # delivered, in training; the workers hold more prefetched batches
    assert ds.table.in_flight() == 30
    ds.stream._preempt_freeze()  # SIGTERM
    ds.stream._preempt_leave()
    epoch = master.epochs("p")[0]
    assert epoch.records_done == 60  # exactly the two trained batches
    # the sampler ran ahead for the workers' prefetch and leased all four shards: each goes
    # back, the first from offset 60, the others whole
    assert epoch.requeues["preempted"] == 4
    again = _ds(master, x, name="p", shard_size=100, ack="next", max_shards=4)
    rest = torch.cat(list(ds_batches(again))).tolist()
    assert sorted(rest) == list(range(60, 400))
    assert torch.cat(first).tolist() == list(range(60)) and third.tolist()[0] == 60


def ds_batches(ds):
    for b in ds.batches(50):
        yield b
    ds.close()


def test_loader_without_workers_and_drop_last():
    master = LocalMaster()
    x = np.arange(70)
    ds = _ds(master, x, name="d", shard_size=20, ack="next")
    sizes = [len(b) for b in ds.loader(16, drop_last=True)]
    assert sizes == [16] * 4  # shards 20, 20, 20, 10: the pass ends with a short batch dropped
    ds.close()
    assert master.epochs("d")[0].records_done == 70
