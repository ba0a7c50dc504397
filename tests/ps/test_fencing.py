"""A primary that is alive but unreachable cannot acknowledge a push its successor lacks, and
replication over TLS + token (CURVE on the data plane): real processes, SIGSTOP / SIGKILL."""
from __future__ import annotations

import signal
import threading

import pytest
import torch
import zmq

from cluster.certs import make_tls_files
from protos import ps_pb2, ps_pb2_grpc
from rpckit import auth
from tests.ps.test_replicas import listing, ps_status, start_pair, wait_until
from worker_sdk.ps.data_client import DataClient

pytestmark = pytest.mark.slow
TOKEN = "replication-token-5d1e"


def push_request(seq: int, generation: int) -> list[bytes]:
    req = ps_pb2.DataRequest(client_id="old-route", seq=seq, generation=generation,
                             push=ps_pb2.Push(tensors=[ps_pb2.TensorMeta(
                                 name="w", dtype="float32", shape=[1])], versions=[0]))
    return [req.SerializeToString(), (-torch.ones(1)).numpy().tobytes()]


def test_a_paused_primary_without_an_in_sync_backup_answers_no_push_after_the_promotion(
        launcher):
    master = launcher.master("--ps-replicas", "1", "--ps-failover-timeout", "1.0")
    primary = launcher.ps(master.address, checkpoint_dir="primary-ckpt")
    wait_until("the primary", lambda: listing(master).generation == 1)
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        # no push yet: pushes answered by a primary without a backup in sync are lost when it
        # is lost for good (docs/ps.md), which is not what this test is about
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
    # paused: alive, its sockets open, but it answers nothing; its lease keeps running out.
    # The backup that joins now cannot copy it, so it never gets in sync.
    primary.pause()
    backup = launcher.ps(master.address, checkpoint_dir="backup-ckpt")
    wait_until("the promotion", lambda: listing(master).generation == 2, timeout=60)
    assert listing(master).data_address == backup.data_address

    # clients that still route by generation 1 queue pushes at the old primary, which
    # continues believing it is the primary (its registrar has not looked yet)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(primary.data_address)
    answers = []
    try:
        for seq in range(1, 21):
            sock.send_multipart(push_request(seq, generation=1))
        primary.resume()
        for seq in range(21, 41):  # and more while it wakes up
            sock.send_multipart(push_request(seq, generation=1))
        while len(answers) < 40:
            assert sock.poll(15_000), f"only {len(answers)} answers from the old primary"
            answers.append(ps_pb2.DataResponse.FromString(sock.recv_multipart()[0]))
    finally:
        sock.close(0)
    answered_by_old = [a.seq for a in answers if a.code == 0]
    assert answered_by_old == []
    assert {(a.code, a.reason) for a in answers} == {(ps_pb2.DataResponse.UNAVAILABLE,
                                                      "FENCED")}

    # every push answered from now on is in the new primary, and only those: lr 1, grad -1
    # (the new primary starts from w = 0 whether it copied the old one when it woke up or
    # was initialized afresh: the first InitParameters wins)
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        assert client.generations == [2]
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
        answered = 0
        for _ in range(30):
            client.push({"w": -torch.ones(1)})
            answered += 1
        assert client.pull()["w"].item() == answered + len(answered_by_old)
    # the old primary learns it was deposed and follows the new one, never a second primary
    wait_until("the old primary a backup", lambda: ps_status(primary).role == "backup")
    assert ps_status(primary).generation == 2
    # the backup either joined before the primary was found lost (promoted, not in sync) or
    # after (it registered as the primary): both only once the old lease had run out
    kinds = [(e.kind, e.cause) for e in master.events()]
    assert ("ps_lost", "health_check") in kinds
    assert ("ps_promoted", "not_in_sync") in kinds or kinds.count(("ps_registered", "again")) >= 1


def test_a_paused_primary_with_an_in_sync_backup_never_answers_alone(launcher):
    """The fast path (no lease wait): the old primary needs the promoted backup's
    acknowledgement, which it refuses, and does not drop it on its own."""
    master, primary, backup = start_pair(launcher)
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
        answered = 0
        for _ in range(10):
            client.push({"w": -torch.ones(1)})
            answered += 1
        primary.pause()
        wait_until("the promotion", lambda: listing(master).generation == 2, timeout=30)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(primary.data_address)
        try:
            for seq in range(1, 11):
                sock.send_multipart(push_request(seq, generation=1))
            primary.resume()
            answers = []
            while len(answers) < 10:
                assert sock.poll(15_000), "the old primary did not answer"
                answers.append(ps_pb2.DataResponse.FromString(sock.recv_multipart()[0]))
        finally:
            sock.close(0)
        assert [a.seq for a in answers if a.code == 0] == []
        assert {a.reason for a in answers} == {"FENCED"}
        for _ in range(10):
            client.push({"w": -torch.ones(1)})
            answered += 1
        assert client.generations == [2]
        assert client.pull()["w"].item() == answered
    assert listing(master).data_address == backup.data_address


def test_replication_over_tls_and_a_token_keeps_every_answered_push(launcher, tmp_path):
    tls = make_tls_files(tmp_path / "tls")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    secure = tls.server_flags(token_file)
    master = launcher.master("--ps-replicas", "1", "--ps-failover-timeout", "1.0", *secure,
                             tls_ca=tls.ca, token=TOKEN)
    primary = launcher.ps(master.address, *secure, checkpoint_dir="primary-ckpt")
    wait_until("the primary", lambda: listing(master).generation == 1)
    assert listing(master).data_public_key  # the data plane is CURVE
    backup = launcher.ps(master.address, *secure, checkpoint_dir="backup-ckpt")
    wait_until("the backup in sync", lambda: [b.state for b in listing(master).backups] ==
               ["in_sync"], timeout=60)

    def status(proc) -> ps_pb2.GetPSStatusResponse:
        with auth.channel(proc.grpc_address, tls_ca=tls.ca, token=TOKEN) as channel:
            return ps_pb2_grpc.ParameterServerStub(channel).GetPSStatus(
                ps_pb2.GetPSStatusRequest(), timeout=5)

    # the backup hears it from its primary (its next Follow), a moment after the master
    wait_until("the backup to know", lambda: (status(backup).role, status(backup)
                                              .replica_state) == ("backup", "in_sync"))
    answered = 0
    killed = threading.Event()

    def kill_mid_stream():
        wait_until("pushes", lambda: answered >= 30, timeout=60, poll=0.005)
        primary.kill(signal.SIGKILL)
        killed.set()

    with DataClient(master=master.address, timeout_s=5, max_attempts=20, tls_ca=tls.ca,
                    auth_token=TOKEN) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
        killer = threading.Thread(target=kill_mid_stream)
        killer.start()
        while not killed.is_set() or answered < 60:
            client.push({"w": -torch.ones(1)})
            answered += 1
        killer.join()
        assert client.generations == [2]
        assert client.pull()["w"].item() == answered
    assert listing(master).data_address == backup.data_address
    assert status(backup).role == "primary"
