"""A PS SIGKILLed without a backup comes back from its checkpoint, and the master says what
was lost: a `ps_restored` event naming the window, and `updates_lost` equal to the records
acknowledged in it. A PS set restarted with another --num-ps refuses to start empty."""
from __future__ import annotations

import json
import time

import grpc
import pytest
import torch

from protos import master_pb2 as pb
from protos import ps_pb2, ps_pb2_grpc
from tests.master.ha.test_standby import _wait
from worker_sdk import PSClient
from worker_sdk.ps.data_client import DataClient

SHARD = 10
BEFORE, AFTER = 4, 3  # shards trained before the checkpoint, and after it (lost)


def _train_shard(stub, worker: str, client: PSClient, model) -> int:
    lease = stub.GetShard(pb.GetShardRequest(worker_id=worker, dataset="d"), timeout=5).leases[0]
    for p in model.parameters():
        p.grad = -torch.ones_like(p)
    client.push(model)  # the records' updates are applied ...
    result = stub.ReportShard(pb.ReportShardRequest(worker_id=worker, reports=[
        pb.ShardReport(lease_id=lease.lease_id, outcome=pb.ShardReport.DONE)]), timeout=5)
    assert result.results[0].accepted  # ... then acknowledged as trained
    return lease.lease_id


def test_updates_lost_match_the_acknowledged_records_of_the_lost_window(launcher):
    master = launcher.master("--worker-timeout", "600")  # this test worker sends no heartbeats
    ps = launcher.ps(master.address, "--checkpoint-interval", "0")
    stub = master.stub()
    worker = stub.RegisterWorker(pb.RegisterWorkerRequest(name="w"), timeout=5).worker_id
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=100 * SHARD, shard_size=SHARD,
                                      num_epochs=1), timeout=5)
    model = torch.nn.Linear(4, 1)
    client = PSClient(master=master.address)
    try:
        client.init_parameters(model, optimizer="sgd", lr=1.0)
        start = model.bias.detach().clone()
        for _ in range(BEFORE):
            _train_shard(stub, worker, client, model)
        time.sleep(0.05)  # the checkpoint's clock reading comes strictly after the last DONE
        with grpc.insecure_channel(ps.grpc_address) as channel:
            ps_pb2_grpc.ParameterServerStub(channel).Checkpoint(ps_pb2.CheckpointRequest(),
                                                                timeout=30)
        time.sleep(0.05)
        for _ in range(AFTER):
            _train_shard(stub, worker, client, model)
        ps.restart()  # SIGKILL, then the same flags: it restores the checkpoint
        event = _wait(lambda: [e for e in master.events() if e.kind == "ps_restored"], 60,
                      "the ps_restored event")[0]
        detail = json.loads(event.detail)
        assert detail["index"] == 0 and detail["from_ms"] < detail["to_ms"]
        assert client.data.client_id in detail["applied"]  # its mark at the checkpoint
        ledger = stub.GetLedger(pb.GetLedgerRequest(), timeout=5)
        assert ledger.records_done == (BEFORE + AFTER) * SHARD
        assert ledger.updates_lost == AFTER * SHARD
        (lost,) = ledger.ps_updates_lost
        assert (lost.index, lost.records, lost.restores) == (0, AFTER * SHARD, 1)
        assert (lost.from_ms, lost.to_ms) == (detail["from_ms"], detail["to_ms"])
        # and the model agrees: SGD with lr 1 and gradients of -1 added 1 per applied push,
        # the pushes after the checkpoint are gone
        client.pull(model)
        assert torch.allclose(model.bias.detach(), start + BEFORE)
        out = launcher.run("-m", "master.ctl", "--master", master.address, "report")
        assert f"UPDATES LOST: {AFTER * SHARD} records" in out.stdout, out.stderr
        out = launcher.run("-m", "master.ctl", "--master", master.address, "status")
        assert f"UPDATES LOST: {AFTER * SHARD} records" in out.stdout, out.stderr
    finally:
        client.close()


def test_a_ps_restarted_with_another_count_keeps_what_its_checkpoint_holds(launcher, tmp_path):
    """A checkpoint records its hash slots (docs/ps.md, "Slots and resize"): a PS restarted
    with another --num-ps restores it and owns what it held, rather than starting empty (the
    next InitParameters would then replace a trained model)."""
    ckpt = tmp_path / "ckpt"
    ps = launcher.ps(None, "--checkpoint-interval", "0", num_ps=1, checkpoint_dir=ckpt)
    model = torch.nn.Linear(4, 1)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = DataClient([ps.data_address])
    try:
        data.init_parameters(params, optimizer="sgd", lr=1.0)
    finally:
        data.close()
    assert ps.terminate() == 0  # a final checkpoint: ps-0-of-1
    again = launcher.ps(None, "--checkpoint-interval", "0", num_ps=2, checkpoint_dir=ckpt)
    assert "restored ps-0-of-1-" in again.output()
    data = DataClient([again.data_address])
    try:
        pulled = data.pull()  # everything it holds
    finally:
        data.close()
    assert all(torch.equal(pulled[n], params[n]) for n in params)
