"""PS replicas end to end: real master and PS processes, the primary SIGKILLed mid-stream."""
from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest
import torch
import zmq

from protos import master_pb2, ps_pb2, ps_pb2_grpc
from rpckit import auth
from worker_sdk.ps.data_client import DataClient

pytestmark = pytest.mark.slow


def listing(master) -> master_pb2.PSInfo:
    resp = master.stub().ListPS(master_pb2.ListPSRequest(), timeout=5)
    return resp.ps[0] if resp.ps else master_pb2.PSInfo()


def wait_until(what, predicate, timeout=30.0, poll=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def ps_status(proc) -> ps_pb2.GetPSStatusResponse:
    with auth.channel(proc.grpc_address) as channel:
        return ps_pb2_grpc.ParameterServerStub(channel).GetPSStatus(
            ps_pb2.GetPSStatusRequest(), timeout=5)


def raw_push(endpoint: str) -> ps_pb2.DataResponse:
    """One push of w -= -1 straight to `endpoint`, no retries: its answer."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        req = ps_pb2.DataRequest(client_id="probe", seq=1, push=ps_pb2.Push(
            tensors=[ps_pb2.TensorMeta(name="w", dtype="float32", shape=[1])], versions=[0]))
        sock.send_multipart([req.SerializeToString(), (-torch.ones(1)).numpy().tobytes()])
        assert sock.poll(10_000), "no answer"
        return ps_pb2.DataResponse.FromString(sock.recv_multipart()[0])
    finally:
        sock.close(0)


def start_pair(launcher, *master_flags):
    master = launcher.master("--ps-replicas", "1", "--ps-failover-timeout", "1.0",
                             *master_flags)
    primary = launcher.ps(master.address, checkpoint_dir="primary-ckpt")
    wait_until("the primary", lambda: listing(master).generation == 1)
    backup = launcher.ps(master.address, checkpoint_dir="backup-ckpt")
    wait_until("the backup in sync", lambda: [b.state for b in listing(master).backups] ==
               ["in_sync"])
    return master, primary, backup


def test_acknowledged_pushes_survive_the_primary_and_it_comes_back_as_a_backup(launcher):
    master, primary, backup = start_pair(launcher)
    assert ps_status(backup).role == "backup"
    answered = 0
    duplicates = 0
    killed_at = []

    def kill_mid_stream():
        wait_until("pushes", lambda: answered >= 40, timeout=60, poll=0.005)
        primary.kill(signal.SIGKILL)
        killed_at.append(answered)

    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
        assert client.generations == [1]
        killer = threading.Thread(target=kill_mid_stream)
        killer.start()
        # SGD with lr 1 and a gradient of -1: the parameter counts the pushes applied
        while not killed_at or answered < killed_at[0] + 40:
            outcome = client.push({"w": -torch.ones(1)})
            answered += 1
            duplicates += outcome.duplicate
        killer.join()
        # every answered push is in the promoted backup, and none twice: the push in flight
        # at the kill was retried with its seq and applied once (answered as a duplicate when
        # the backup had it already)
        assert client.pull()["w"].item() == answered
        assert duplicates <= 1
        assert client.generations == [2]
    info = listing(master)
    assert info.generation == 2 and info.data_address == backup.data_address

    # the old primary comes back: a backup of the new one, never a second primary
    primary.restart()
    wait_until("the old primary in sync", lambda: [b.state for b in listing(master).backups]
               == ["in_sync"])
    status = ps_status(primary)
    assert (status.role, status.generation) == ("backup", 2)
    assert [t.version for t in status.tensors] == [answered]
    refused = raw_push(primary.data_address)
    assert (refused.code, refused.reason) == (ps_pb2.DataResponse.UNAVAILABLE, "FENCED")
    assert listing(master).data_address == backup.data_address
    kinds = [(e.kind, e.cause) for e in master.events()]
    assert ("ps_promoted", "in_sync") in kinds and ("ps_lost", "failover") in kinds
    # elastic-ctl status names the index's primary, its generation and its backup in sync
    out = launcher.run("-m", "master.ctl", "--master", master.address, "status")
    rows = [line.split() for line in out.stdout.split("PARAMETER SERVERS")[1].splitlines()[2:]]
    assert [r[:5] for r in rows] == [["0/1", "primary", "alive", "2", backup.grpc_address],
                                     ["0/1", "backup", "in_sync", "2", primary.grpc_address]]


def test_steps_are_replicated_whole_and_survive_the_primary(launcher):
    """Steps (a push, a row push and reads in one message) go through the replication order:
    after the primary is SIGKILLed, the promoted backup holds every answered step's dense and
    row updates exactly once, and its reads answer them."""
    from pswire.tables import TableSpec

    master, primary, backup = start_pair(launcher)
    ids = torch.tensor([0, 3, 8])
    answered = 0
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0,
                               tables=[TableSpec("t", 2, initializer="zeros")])
        for i in range(60):
            if i == 30:
                primary.kill(signal.SIGKILL)
            out = client.step({"w": -torch.ones(1)}, rows=[("t", ids, -torch.ones(3, 2))],
                              pull=["w"], pull_rows={"t": ids})
            answered += 1
            # the reads come after this step's mutations, whichever primary answered
            assert out.dense["w"].item() == answered
            assert out.rows["t"].tolist() == [[float(answered)] * 2] * 3
        assert client.generations == [2]
        assert client.pull_rows("t", ids).tolist() == [[60.0, 60.0]] * 3
    assert listing(master).data_address == backup.data_address
    assert [t.version for t in ps_status(backup).tensors] == [60]


def _table_facts(proc) -> tuple:
    t = ps_status(proc).tables[0]
    return t.rows, t.admitted, t.filtered, dict(t.evicted)


def test_a_backup_holds_the_same_bounded_table_rows_as_its_primary(launcher):
    """A bounded table's reads change it (sightings for admission, evictions at the cap, the
    touch order): they go through the replication order too, so the backup admits and evicts
    the same rows. Without that it admits nothing (only pulls count sightings) and drops
    every row push, and the promoted backup answers initial values."""
    from pswire.tables import TableSpec

    master, primary, backup = start_pair(launcher)
    spec = TableSpec("t", 2, initializer="zeros", admit_after=2, max_rows=4)
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0, tables=[spec])
        for first in range(0, 12, 2):  # a stream of ids over a cap of 4 rows
            ids = torch.tensor([first, first + 1, 1])
            client.pull_rows("t", ids)              # first sighting of the new ids
            client.step(pull_rows={"t": ids})       # second: admitted (a Step of reads only)
            client.push_rows("t", ids, -torch.ones(3, 2))
        ids = torch.arange(12)
        before = client.pull_rows("t", ids)
        wait_until("the backup caught up", lambda: _table_facts(backup) ==
                   _table_facts(primary), timeout=10)
        facts = _table_facts(primary)
        assert facts[0] == 4 and facts[3].get("cap", 0) > 0  # capped, so rows were evicted
        assert (before != 0).any()  # trained rows are held
        primary.kill(signal.SIGKILL)
        after = client.pull_rows("t", ids)
        assert client.generations == [2]
    assert torch.equal(after, before)


def test_a_backup_whose_primary_refuses_its_token_exits_1_naming_its_source(launcher):
    """Not retried: the backup stops at the first refusal (the master here takes no token, so
    only the primary tells the two tokens apart)."""
    master = launcher.master("--ps-replicas", "1")
    launcher.ps(master.address, "--auth-token", "primary-token", checkpoint_dir="primary-ckpt")
    wait_until("the primary", lambda: listing(master).generation == 1)
    backup = launcher.ps(master.address, "--auth-token", "other-token",
                         checkpoint_dir="backup-ckpt")
    assert backup.wait(30) == 1, backup.output(tail=3000)
    out = backup.output()
    assert "refused the auth token from --auth-token" in out and "not retried" in out
    assert "other-token" not in out
