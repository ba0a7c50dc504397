"""The PS-facing side of the SDK (worker_sdk.ps.data_client.DataClient) against real data planes:
all-or-nothing staleness over several PS, sparse gradients, another model, a PS that dies."""
from __future__ import annotations

import logging
import signal
import threading

import grpc
import pytest
import torch
from torch import nn

from protos import ps_pb2, ps_pb2_grpc
from ps.store.params import ParamStore
from worker_sdk.ps.data_client import DataClient, PSError, PSUnavailable, StaleGradient


def _two_ps(inproc_ps, max_staleness: int):
    return [inproc_ps(ParamStore(index=i, num_ps=2, max_staleness=max_staleness))
            for i in range(2)]


MODEL = {"a": torch.zeros(4), "b": torch.zeros(4)}


def test_a_stale_push_over_two_ps_is_applied_by_neither(inproc_ps):
    ps = _two_ps(inproc_ps, max_staleness=0)
    endpoints = [p.endpoint for p in ps]
    with DataClient(endpoints, timeout_s=5) as a, DataClient(endpoints, timeout_s=5) as b:
        a.init_parameters(MODEL, "sgd", lr=1.0)
        assert {a.owner["a"], a.owner["b"]} == {0, 1}  # one tensor on each PS
        a.pull()
        b.pull()
        b.push({"a": torch.ones(4)})  # only "a" moves on: a's gradient of "a" is one stale
        with pytest.raises(StaleGradient) as err:
            a.push({"a": torch.ones(4), "b": torch.ones(4)})
        assert err.value.reason == "STALE_GRADIENT"
        # "b"'s PS found nothing stale, yet applied nothing of the refused step
        store_b = ps[a.owner["b"]].store
        assert store_b.dense["b"].version == 0 and store_b.stats.pushes == 0
        assert torch.equal(store_b.dense["b"].value, torch.zeros(4))
        # after a pull the same step goes through on both
        a.pull()
        out = a.push({"a": torch.ones(4), "b": torch.ones(4)})
        assert out.versions == {"a": 2, "b": 1}


def test_a_push_to_one_ps_needs_no_check_round(inproc_ps):
    ps = _two_ps(inproc_ps, max_staleness=0)
    with DataClient([p.endpoint for p in ps], timeout_s=5) as c:
        c.init_parameters(MODEL, "sgd", lr=1.0)
        c.pull()
        assert c.staleness_checked == {0: True, 1: True}
        c.push({"a": torch.ones(4)})
        assert sum(p.store.applied.duplicates for p in ps) == 0


@pytest.mark.parametrize("module", [nn.Embedding(50, 4, sparse=True),
                                    nn.EmbeddingBag(50, 4, mode="sum", sparse=True)])
def test_a_stock_sparse_embedding_pushes_like_a_dense_one(inproc_ps, module):
    ps = inproc_ps()
    torch.manual_seed(0)
    local = nn.Sequential(module, nn.Linear(4, 1))
    remote = {n: p.detach().clone() for n, p in local.named_parameters()}
    ids = torch.tensor([[1, 2, 2], [7, 1, 3]])
    with DataClient([ps.endpoint], timeout_s=5) as c:
        c.init_parameters(remote, "sgd", lr=0.5)
        c.pull()
        out = local(ids).sum()
        out.backward()
        grads = {n: p.grad for n, p in local.named_parameters()}
        assert grads["0.weight"].is_sparse
        c.push(grads)
        pulled = c.pull()
    torch.optim.SGD(local.parameters(), lr=0.5).step()  # the same step locally
    for name, p in local.named_parameters():
        assert torch.allclose(pulled[name], p.detach()), name


def test_another_model_is_refused_at_init_with_model_mismatch(inproc_ps):
    ps = inproc_ps()
    with DataClient([ps.endpoint], timeout_s=5) as c:
        assert c.init_parameters({"w": torch.zeros(3, 4)}, "adagrad", lr=0.1)
        assert not c.init_parameters({"w": torch.ones(3, 4)}, "adagrad", lr=0.1)  # same model
        with pytest.raises(PSError) as err:
            c.init_parameters({"w": torch.zeros(4, 3)}, "adagrad", lr=0.1)
        assert err.value.reason == "MODEL_MISMATCH" and "'w'" in err.value.message
        assert "float32[3, 4]" in err.value.message and "float32[4, 3]" in err.value.message
        with pytest.raises(PSError) as err:
            c.init_parameters({"w": torch.zeros(3, 4)}, "sgd", lr=0.1)
        assert err.value.reason == "MODEL_MISMATCH" and "optimizer" in err.value.message


def _checkpoint(ps) -> None:
    with grpc.insecure_channel(ps.grpc_address) as ch:
        ps_pb2_grpc.ParameterServerStub(ch).Checkpoint(ps_pb2.CheckpointRequest(), timeout=30)


@pytest.mark.slow
def test_a_ps_that_dies_mid_push_gives_psunavailable_within_the_budget(launcher):
    ps = launcher.ps(None, "--checkpoint-interval", "0")
    with DataClient([ps.data_address], timeout_s=30) as setup:
        setup.init_parameters({"w": torch.zeros(1000)}, "sgd", lr=1.0)
    with DataClient([ps.data_address], timeout_s=1.0, max_attempts=1000, retry_budget_s=3,
                    same_host=False) as c:
        c.pull()
        ps.kill(signal.SIGKILL)
        with pytest.raises(PSUnavailable) as err:
            c.push({"w": torch.ones(1000)})
    assert err.value.code == "UNAVAILABLE" and "retry budget 3s" in err.value.message
    assert "PS 0" in err.value.message and ps.data_address in err.value.message


@pytest.mark.slow
def test_a_push_waits_for_a_ps_restarted_within_the_budget_and_logs_once(launcher, caplog):
    master = launcher.master().address
    ps = launcher.ps(master, "--checkpoint-interval", "0")
    with DataClient(master=master, timeout_s=30) as setup:
        setup.init_parameters({"w": torch.zeros(1000)}, "sgd", lr=1.0)
    with DataClient(master=master, timeout_s=1.0, retry_budget_s=60, max_attempts=1000,
                    same_host=False) as c:
        c.pull()
        _checkpoint(ps)  # the restarted PS holds the model
        ps.kill(signal.SIGKILL)
        seen = len(caplog.records)  # a PS just started may answer "pending" at first
        result: list = []
        pusher = threading.Thread(target=lambda: result.append(c.push({"w": torch.ones(1000)})))
        with caplog.at_level(logging.INFO, logger="worker_sdk.ps.data_client"):
            pusher.start()
            ps.start()
            pusher.join(90)
        assert result and result[0].versions == {"w": 1}
        # one line for the push's recovery, however many tries it took
        recoveries = [r for r in caplog.records[seen:] if "recovered on try" in r.getMessage()]
        assert len(recoveries) == 1 and recoveries[0].levelname == "WARNING"
        assert torch.equal(c.pull()["w"], -torch.ones(1000))


class _Ledger:
    """A lease table as the ack ledger sees one: records what the SDK acknowledged."""

    def __init__(self):
        self.trained: list = []
        self.failed: list[str] = []
        self.released: list[bool] = []

    def mark_trained(self, upto=None) -> int:
        self.trained.append(upto)
        return 0

    def fail_in_flight(self, message: str, released: bool = False) -> int:
        self.failed.append(message)
        self.released.append(released)
        return 1


@pytest.mark.slow
@pytest.mark.parametrize("wait", [True, False])
def test_a_stale_step_pushes_no_rows_and_acknowledges_nothing(launcher, inproc_ps, wait):
    from protos import master_pb2, master_pb2_grpc
    from worker_sdk import ack
    from worker_sdk.ps.client import ElasticEmbedding, PSClient

    master = launcher.master()
    ps = _two_ps(inproc_ps, max_staleness=0)
    with grpc.insecure_channel(master.address) as ch:
        stub = master_pb2_grpc.MasterStub(ch)
        for i, p in enumerate(ps):
            stub.RegisterPS(master_pb2.RegisterPSRequest(
                address=f"127.0.0.1:{1000 + i}", data_address=p.endpoint, index=i, num_ps=2),
                timeout=10)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = ElasticEmbedding(dim=2, table="e", initializer="zeros")
            # named so that the slot layout puts weight and bias on different PS
            self.head = nn.Linear(2, 1)

        def forward(self, ids):
            return self.head(self.emb(ids)).sum()

    ledger = _Ledger()
    acks = ack.AckLedger()  # the client reports to the ledger it is given, and only to it
    acks.register(ledger)
    model = Model()
    client = PSClient(master.address, timeout_s=10, ledger=acks)
    other = DataClient(master=master.address, timeout_s=10)
    try:
        client.init_parameters(model, optimizer="sgd", lr=0.1)
        assert {client.data.owner["head.weight"], client.data.owner["head.bias"]} == {0, 1}
        other.pull()
        model(torch.tensor([1, 2, 3])).backward()
        other.push({"head.weight": torch.ones(1, 2)})  # the step's weight is now one stale
        client.push(model, wait=wait)
        if not wait:
            client.flush(30)
        assert client.stale_refusals == 1
        weight_ps, bias_ps = ps[other.owner["head.weight"]], ps[other.owner["head.bias"]]
        assert weight_ps.store.stats.pushes == 1  # the other client's only
        assert bias_ps.store.stats.pushes == 0 and bias_ps.store.dense["head.bias"].version == 0
        assert all(p.store.tables["e"].pushes == 0 for p in ps)  # no rows pushed
        assert ledger.trained == [] and len(ledger.failed) == 1  # abandoned, not acknowledged
        assert "stale" in ledger.failed[0]
        assert ledger.released == [True]  # handed back, not a failure of the data
        # the next step, from fresh parameters, goes through and is acknowledged
        client.pull(model)
        model(torch.tensor([1, 2, 3])).backward()
        client.push(model)
        assert len(ledger.trained) == 1
        assert sum(p.store.tables["e"].pushes for p in ps) == 2
    finally:
        acks.unregister(ledger)
        other.close()
        client.close()


def test_a_forward_of_ids_outside_the_table_raises_before_pulling_them(launcher, inproc_ps):
    from protos import master_pb2, master_pb2_grpc
    from worker_sdk.ps.client import ElasticEmbedding, PSClient

    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1))
    with grpc.insecure_channel(master.address) as ch:
        master_pb2_grpc.MasterStub(ch).RegisterPS(master_pb2.RegisterPSRequest(
            address="127.0.0.1:1000", data_address=ps.endpoint, index=0, num_ps=1), timeout=10)
    emb = ElasticEmbedding(10, dim=2, table="e", initializer="zeros")
    client = PSClient(master.address, timeout_s=10)
    try:
        client.init_parameters(emb, optimizer="sgd", lr=0.1)
        table = ps.store.tables["e"]
        for prefetched in (False, True):
            for bad, why in (([3, 10], "outside table 'e'"), ([-1, 3], ">= 0")):
                if prefetched:
                    client.prefetch(torch.tensor(bad))
                with pytest.raises(ValueError, match=why):
                    emb(torch.tensor(bad))
                assert len(table) == 0  # no row of the batch was pulled (or created)
        client.prefetch(torch.tensor([[3, 9], [9, 3]]))
        assert emb(torch.tensor([[3, 9], [9, 3]])).shape == (2, 2, 2) and len(table) == 2
        assert emb(torch.tensor([0])).shape == (1, 2) and len(table) == 3  # not prefetched
    finally:
        client.close()
