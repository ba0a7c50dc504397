"""End to end: real master and PS processes, killed and restarted."""
from __future__ import annotations

import signal
import socket
import time

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import master_pb2, master_pb2_grpc, ps_pb2, ps_pb2_grpc
from pswire.slots import Layout
from worker_sdk.ps.data_client import DataClient
from ps.store.embedding import initial_rows
from pswire.tables import TableSpec

pytestmark = pytest.mark.slow

TABLE = TableSpec("emb", 8, "normal", 0.0, 0.1, seed=42)


def _model() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"l1.weight": torch.randn(64, 32, generator=g), "l1.bias": torch.randn(64, generator=g),
            "l2.weight": torch.randn(10, 64, generator=g), "l2.bias": torch.randn(10, generator=g)}


def _ps_stub(address: str):
    return ps_pb2_grpc.ParameterServerStub(grpc.insecure_channel(address))


def _list_ps(master: str) -> master_pb2.ListPSResponse:
    stub = master_pb2_grpc.MasterStub(grpc.insecure_channel(master))
    return stub.ListPS(master_pb2.ListPSRequest(), timeout=5)


def test_two_ps_register_split_the_model_and_the_rows(launcher):
    master = launcher.master().address
    starting = [launcher.ps(master, index=i, num_ps=2, wait=False) for i in range(2)]
    started = [launcher.wait_ready(p) for p in starting]
    deadline = time.monotonic() + 20
    while not _list_ps(master).complete and time.monotonic() < deadline:
        time.sleep(0.1)
    listed = _list_ps(master)
    assert listed.complete and [(p.address, p.data_address) for p in listed.ps] == \
        [(p.grpc_address, p.data_address) for p in started]

    model = _model()
    with DataClient(master=master, timeout_s=10) as c:
        assert c.init_parameters(model, "adagrad", lr=0.1, tables=[TABLE])
        # same machine: after the first answer each PS is reached over its Unix socket
        assert all(t.startswith("unix://") for t in c.transports), c.transports
        ids = torch.arange(100)
        rows = c.pull_rows("emb", ids)
        # rows come from the shared rule (seed, table, id), whichever PS created them
        assert torch.equal(rows, initial_rows(TABLE, ids.numpy()))
        c.push_rows("emb", torch.tensor([3, 3, 4]), torch.ones(3, 8))
        pulled = c.pull()
        assert all(torch.equal(pulled[n], t) for n, t in model.items())

    layout = Layout.initial(2)  # the master's first layout (docs/ps.md, "Slots and resize")
    expected = {n: layout.owner_of_tensor(n) for n in model}
    owners = layout.owner_of_rows(np.arange(100))
    for index, ps in enumerate(started):
        grpc_addr = ps.grpc_address
        status = _ps_stub(grpc_addr).GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=5)
        assert status.index == index and status.num_ps == 2 and status.initialized
        assert sorted(t.meta.name for t in status.tensors) == \
            sorted(n for n, i in expected.items() if i == index)
        assert status.tables[0].rows == int((owners == index).sum())  # its slots' ids only
        assert status.tables[0].pushes == int(index in owners[[3, 4]])  # ids 3, 3, 4
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(grpc_addr)).Check(
            health_pb2.HealthCheckRequest(service="elasticps.v1.ParameterServer"), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_sigkill_restart_comes_back_with_exactly_its_last_checkpoint(launcher):
    master = launcher.master().address
    ps = launcher.ps(master, "--checkpoint-interval", "0", checkpoint_dir="ck")
    grpc_addr = ps.grpc_address
    c = DataClient(master=master, timeout_s=1.0, backoff_s=0.05, max_attempts=30)
    try:
        c.init_parameters(_model(), "adam", lr=0.01,
                          tables=[(TABLE, {"name": "adagrad", "lr": 0.1})])
        for step in range(3):
            c.pull()
            c.push({n: torch.full_like(t, 0.1 * (step + 1)) for n, t in _model().items()})
            c.push_rows("emb", torch.tensor([1, 2, 2]), torch.full((3, 8), 0.5))
        reply = _ps_stub(grpc_addr).Checkpoint(ps_pb2.CheckpointRequest(), timeout=30)
        assert reply.path.startswith("ps-0-of-1-") and reply.bytes > 0
        at_checkpoint = {n: t.clone() for n, t in c.pull().items()}
        versions = dict(c.versions)
        rows = c.pull_rows("emb", torch.tensor([1, 2])).clone()
        for _ in range(2):  # applied, but after the checkpoint: lost with the process
            c.push({n: torch.ones_like(t) for n, t in _model().items()})
            c.push_rows("emb", torch.tensor([1]), torch.ones(1, 8))
        ps.signal(signal.SIGKILL)
        ps.wait()
        # a damaged newer file (a torn write) must be refused, not trusted
        (launcher.workdir / "ck" / "ps-0-of-1-00000099.ckpt").write_bytes(b"EPSCKPT1 torn")
        ps2 = launcher.ps(master, "--checkpoint-interval", "0", checkpoint_dir="ck")
        grpc2 = ps2.grpc_address
        # the same client finds the restarted PS (new ports) through the master and retries
        now = c.pull()
        assert c.versions == versions
        for n, t in at_checkpoint.items():
            assert torch.equal(now[n], t), n
        assert torch.equal(c.pull_rows("emb", torch.tensor([1, 2])), rows)
        fresh = c.pull_rows("emb", torch.tensor([77]))  # never created before: same rule
        assert torch.equal(fresh, initial_rows(TABLE, np.array([77])))
        status = _ps_stub(grpc2).GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=5)
        assert status.restored_from == reply.path
        assert "refusing checkpoint ps-0-of-1-00000099.ckpt" in ps2.output()
    finally:
        c.close()


def test_sigterm_loses_nothing(launcher):
    ps = launcher.ps(None, "--checkpoint-interval", "0", checkpoint_dir="ck")
    data = ps.data_address
    c = DataClient([data], timeout_s=5)
    try:
        c.init_parameters({"w": torch.zeros(1000)}, "sgd", lr=1.0, momentum=0.9,
                          tables=[TABLE])
        for step in range(5):
            c.pull()
            c.push({"w": torch.full((1000,), float(step))})
        c.push_rows("emb", torch.tensor([5]), torch.ones(1, 8))
        last_seq = c.exchange._seq
        before = c.pull()["w"].clone()
        rows = c.pull_rows("emb", torch.tensor([5])).clone()
    finally:
        c.close()
    assert ps.terminate() == 0
    assert "final checkpoint" in ps.output()

    ps2 = launcher.ps(None, "--checkpoint-interval", "0", checkpoint_dir="ck")
    data2 = ps2.data_address
    with DataClient([data2], timeout_s=5, client_id=c.client_id) as again:
        assert torch.equal(again.pull()["w"], before) and again.versions == {"w": 5}
        assert torch.equal(again.pull_rows("emb", torch.tensor([5])), rows)
        # the push of seq 5 retried after the restart: the applied table came back too
        again.exchange._seq = last_seq - 4
        assert again.push({"w": torch.ones(1000)}, versions={"w": 4}).duplicate
        # momentum buffers came back: one more step equals the local torch.optim step
        w = torch.zeros(1000, requires_grad=True)
        opt = torch.optim.SGD([w], lr=1.0, momentum=0.9)
        for step in [*range(5), 7]:
            w.grad = torch.full((1000,), float(step))
            opt.step()
        again.exchange._seq = last_seq + 10
        again.push({"w": torch.full((1000,), 7.0)})
        torch.testing.assert_close(again.pull()["w"], w.detach())
    assert ps2.terminate() == 0


def test_registers_again_after_the_master_lost_its_database(launcher):
    master_proc = launcher.master()
    master = master_proc.address
    ps = launcher.ps(master, "--register-interval", "0.5", checkpoint_dir="ck")
    grpc_addr, data = ps.grpc_address, ps.data_address
    deadline = time.monotonic() + 20
    while not _list_ps(master).complete and time.monotonic() < deadline:
        time.sleep(0.1)
    assert master_proc.terminate() == 0
    # a new, empty database (each master has its own), same address
    master2_proc = launcher.master(port=master_proc.port)
    master2 = master2_proc.address
    deadline = time.monotonic() + 20
    listed = _list_ps(master2)
    while not listed.complete and time.monotonic() < deadline:
        time.sleep(0.1)
        listed = _list_ps(master2)
    assert listed.complete, f"PS log:\n{ps.output()}\nmaster log:\n{master2_proc.output()}"
    assert (listed.ps[0].address, listed.ps[0].data_address) == (grpc_addr, data)


def _busy_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_bad_flags_and_ports_in_use_exit_non_zero_with_a_message(launcher, tmp_path):
    ck = str(tmp_path / "ck")
    bad = launcher.run("-m", "ps", "--standalone", "--index", "3", "--num-ps", "2",
                       "--checkpoint-dir", ck)
    assert bad.returncode == 2 and "--index 3 is outside 0..1" in bad.stderr
    no_master = launcher.run("-m", "ps", "--checkpoint-dir", ck)
    assert no_master.returncode == 2 and "--master HOST:PORT is required" in no_master.stderr
    with _busy_port() as busy:
        port = busy.getsockname()[1]
        for flag in ("--port", "--data-port"):
            r = launcher.run("-m", "ps", "--standalone", "--host", "127.0.0.1", flag,
                             str(port), "--checkpoint-dir", ck)
            assert r.returncode == 1, r.stderr
            assert "cannot listen" in r.stderr and str(port) in r.stderr
