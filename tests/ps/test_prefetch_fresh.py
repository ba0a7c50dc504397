"""What parameters a pipelined step computes on: with `prefetch_ahead=0` a worker's step reads
every push of its own (the next batch's request rides with the last push, and the PS applies
that push before it reads); with `prefetch_ahead=1` it misses the last one. A real master, a
real PS data plane, ElasticDataset's batches and PSClient, as a training loop uses them."""
from __future__ import annotations

import grpc
import pytest
import torch
from torch import nn

from protos import master_pb2, master_pb2_grpc
from ps.store.params import ParamStore
from worker_sdk import ArrayReader, ElasticDataset, ElasticEmbedding, PSClient, ack

BATCH, STEPS, LR = 2, 6, 0.5
ID = 5  # every record is this id: each push moves its row by BATCH * LR, the dense by LR


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = ElasticEmbedding(dim=2, table="e", initializer="zeros")
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows = self.emb(ids)
        return rows, rows.sum() + self.w.sum()


def _register(master, ps) -> None:
    with grpc.insecure_channel(master.address) as ch:
        master_pb2_grpc.MasterStub(ch).RegisterPS(master_pb2.RegisterPSRequest(
            address="127.0.0.1:1000", data_address=ps.endpoint, index=0, num_ps=1), timeout=10)


@pytest.mark.parametrize("ahead, missed", [(0, 0), (1, 1)])
def test_a_step_computes_on_its_own_pushes_unless_it_prefetches_ahead(
        launcher, inproc_ps, ahead, missed):
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1))
    _register(master, ps)
    model = Model()
    client = PSClient(master.address, timeout_s=10, max_inflight=1)
    ds = ElasticDataset(ArrayReader(torch.full((BATCH * STEPS,), ID, dtype=torch.int64)),
                        master=master.address, name="train", shard_size=BATCH * STEPS,
                        num_epochs=1, worker_name="fresh")
    seen = []  # (the row's value, the dense value) each step computed on
    try:
        client.init_parameters(model, optimizer="sgd", lr=LR)
        for ids in ds.batches(BATCH, prefetch=client.prefetch, prefetch_ahead=ahead):
            client.pull(model)
            rows, loss = model(ids)
            seen.append((rows[0, 0].item(), model.w.item()))
            loss.backward()
            client.push(model, wait=False)
        client.flush()
        assert client.pipeline.take_stale() == 0
        table = ps.store.tables["e"]
        assert table.pushes == STEPS  # every step's rows pushed once, none refused
    finally:
        ds.close()
        client.close()
        ack.use_push_acks(False)  # process-wide: later tests' datasets ack on "next"
    # the pushes applied before each step's reads: all before it, or all but the last
    applied = [max(0, k - missed) for k in range(STEPS)]
    assert seen == [(-n * BATCH * LR, -n * LR) for n in applied]
