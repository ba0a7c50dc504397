"""Security on real processes over 127.0.0.1: a master and a PS serving TLS (certificates made
at test time) and requiring a token; `elastic-ctl` and a worker (the SDK) given both.

A call without the token, or with a wrong one, is UNAUTHENTICATED and changes nothing (the
master's state and the PS's parameters are compared before and after); health needs no token;
a client that does not speak TLS, or trusts another CA, does not get in.
"""
from __future__ import annotations

import time

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from torch import nn

from cluster.launch import Launcher
from protos import master_pb2 as mpb
from protos import master_pb2_grpc as mpb_grpc
from protos import ps_pb2, ps_pb2_grpc
from rpckit import auth
from rpckit.errors import Reason, reason_of
from cluster.certs import make_tls_files
from rpckit.errors import ServiceError
from worker_sdk import ElasticDataset, PSClient
from worker_sdk.ps.data_client import DataClient, PSUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOKEN = "job-token-7f3a9c"
RECORDS = 96


class Cluster:
    def __init__(self, launcher: Launcher, tls, token_file: str):
        self.tls, self.token_file = tls, token_file
        secure = tls.server_flags(token_file)
        self.master = launcher.master(*secure, tls_ca=tls.ca, token=TOKEN)
        self.ps = launcher.ps(self.master.address, *secure)
        self.launcher = launcher
        self._wait_for_the_ps()

    def _wait_for_the_ps(self, timeout_s: float = 60.0) -> None:
        """Tests compare the master's state before and after a refused call: the PS's own
        registration must not land in between."""
        stub = mpb_grpc.MasterStub(self.channel(self.master.address))
        deadline = time.monotonic() + timeout_s
        while not stub.ListPS(mpb.ListPSRequest(), timeout=5).complete:
            assert time.monotonic() < deadline, "the PS did not register with the master"
            time.sleep(0.05)

    def channel(self, address: str, **kw) -> grpc.Channel:
        return auth.channel(address, **{"tls_ca": self.tls.ca, "token": TOKEN, **kw})

    def master_state(self) -> tuple:
        """Everything a refused call could have changed on the master."""
        status = self.master.status()
        events = self.master.events()
        listed = mpb_grpc.MasterStub(self.channel(self.master.address)).ListPS(
            mpb.ListPSRequest(), timeout=5)
        return (tuple(d.SerializeToString() for d in status.datasets),
                tuple(w.worker_id for w in status.workers), len(events),
                listed.SerializeToString())

    def ps_status(self, **kw) -> ps_pb2.GetPSStatusResponse:
        with self.channel(self.ps.grpc_address, **kw) as ch:
            return ps_pb2_grpc.ParameterServerStub(ch).GetPSStatus(
                ps_pb2.GetPSStatusRequest(), timeout=5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("security")
    tls = make_tls_files(root / "tls")
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with Launcher(root / "procs") as launcher:
        yield Cluster(launcher, tls, str(token_file))


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


@pytest.mark.parametrize("token", [None, "wrong-token", TOKEN + "0"])
def test_master_refuses_calls_without_the_token_and_changes_nothing(cluster, token):
    before = cluster.master_state()
    with cluster.channel(cluster.master.address, token=token) as ch:
        stub = mpb_grpc.MasterStub(ch)
        calls = [
            lambda: stub.CreateDataset(mpb.DatasetSpec(name="intruder", num_records=10,
                                                       shard_size=5, num_epochs=1), timeout=5),
            lambda: stub.RegisterWorker(mpb.RegisterWorkerRequest(name="intruder"), timeout=5),
            lambda: stub.RegisterPS(mpb.RegisterPSRequest(address="10.0.0.1:1",
                                                          data_address="tcp://10.0.0.1:2",
                                                          index=0, num_ps=1), timeout=5),
            lambda: stub.GetStatus(mpb.GetStatusRequest(), timeout=5),
            lambda: stub.GetEvents(mpb.GetEventsRequest(), timeout=5),
        ]
        for call in calls:
            err = _refused(call)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err
            assert reason_of(err) == Reason.UNAUTHENTICATED
    assert cluster.master_state() == before


def test_health_answers_without_a_token(cluster):
    for address in (cluster.master.address, cluster.ps.grpc_address):
        with auth.channel(address, tls_ca=cluster.tls.ca) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                         timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_plaintext_clients_and_other_cas_do_not_get_in(cluster, tmp_path):
    other = make_tls_files(tmp_path / "other", "another CA")
    for kw in ({"tls_ca": ""}, {"tls_ca": other.ca}):
        with cluster.channel(cluster.master.address, **kw) as ch:
            err = _refused(lambda: mpb_grpc.MasterStub(ch).GetStatus(mpb.GetStatusRequest(),
                                                                     timeout=5))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        err = _refused(lambda: cluster.ps_status(**kw))
        assert err.code() == grpc.StatusCode.UNAVAILABLE


def test_ps_control_plane_refuses_calls_without_the_token(cluster):
    before = cluster.ps_status()
    for token in (None, "wrong-token"):
        with cluster.channel(cluster.ps.grpc_address, token=token) as ch:
            stub = ps_pb2_grpc.ParameterServerStub(ch)
            for call in (lambda: stub.Checkpoint(ps_pb2.CheckpointRequest(), timeout=5),
                         lambda: stub.GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=5)):
                err = _refused(call)
                assert err.code() == grpc.StatusCode.UNAUTHENTICATED
                assert reason_of(err) == Reason.UNAUTHENTICATED
    assert cluster.ps_status().checkpoints == before.checkpoints


def test_the_ps_registered_over_tls_with_its_token(cluster):
    with cluster.channel(cluster.master.address) as ch:
        listed = mpb_grpc.MasterStub(ch).ListPS(mpb.ListPSRequest(), timeout=5)
    assert listed.complete
    assert [p.address for p in listed.ps] == [cluster.ps.grpc_address]
    assert all(p.state == "alive" for p in listed.ps)  # the master's TLS health checks pass


def test_the_data_plane_is_encrypted_and_needs_the_token(cluster):
    """On a PS of its own (standalone: no master), so the job's PS stays untouched."""
    secure = ("--tls-cert", cluster.tls.cert, "--tls-key", cluster.tls.key,
              "--auth-token-file", cluster.token_file)
    ps = cluster.launcher.ps(None, *secure, index=0, checkpoint_dir="standalone-ckpt")
    with cluster.channel(ps.grpc_address) as ch:
        status = ps_pb2_grpc.ParameterServerStub(ch).GetPSStatus(ps_pb2.GetPSStatusRequest(),
                                                                 timeout=5)
    with cluster.channel(cluster.master.address) as ch:
        listed = mpb_grpc.MasterStub(ch).ListPS(mpb.ListPSRequest(), timeout=5).ps[0]
    assert auth.is_curve_key(listed.data_public_key)  # the job's PS registered its key
    assert listed.data_public_key == cluster.ps_status().data_public_key
    endpoint, key = status.data_address, status.data_public_key
    assert auth.is_curve_key(key)
    with DataClient([endpoint], server_keys=[key], auth_token=TOKEN, tls_ca="",
                    timeout_s=5) as c:
        c.init_parameters({"probe": torch.zeros(3)}, "sgd", lr=1.0)
        before = c.pull(["probe"])["probe"].clone()
    for token in ("", "wrong-token"):
        with DataClient([endpoint], server_keys=[key], auth_token=token, tls_ca="",
                        timeout_s=5) as c:
            c.set_layout({"probe": 12})
            with pytest.raises(ServiceError) as err:
                c.push({"probe": torch.ones(3)})
            assert err.value.reason == Reason.UNAUTHENTICATED
    with DataClient([endpoint], auth_token=TOKEN, tls_ca="", timeout_s=0.5, max_attempts=2,
                    backoff_s=0.01, same_host=False) as plaintext:
        plaintext.set_layout({"probe": 12})
        with pytest.raises(PSUnavailable):
            plaintext.push({"probe": torch.ones(3)})
    with cluster.channel(ps.grpc_address) as ch:
        assert ps_pb2_grpc.ParameterServerStub(ch).GetPSStatus(
            ps_pb2.GetPSStatusRequest(), timeout=5).pushes == 0
    with DataClient([endpoint], server_keys=[key], auth_token=TOKEN, tls_ca="",
                    timeout_s=5) as c:
        c.set_layout({"probe": 12})
        assert torch.equal(c.pull(["probe"])["probe"], before)


def test_elastic_ctl_takes_the_ca_and_the_token(cluster):
    base = ("-m", "master.ctl", "--master", cluster.master.address, "--tls-ca", cluster.tls.ca)
    ok = cluster.launcher.run(*base, "--auth-token-file", cluster.token_file, "status")
    assert ok.returncode == 0, ok.stderr
    assert "PARAMETER SERVERS" in ok.stdout
    by_env = cluster.launcher.run(*base, "status", ELASTIC_PS_AUTH_TOKEN=TOKEN)
    assert by_env.returncode == 0, by_env.stderr
    refused = cluster.launcher.run(*base, "--auth-token", "wrong-token", "status")
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    assert "wrong-token" not in refused.stderr


def test_a_wrong_token_fails_the_sdk_within_2s_naming_its_source(cluster, monkeypatch):
    """UNAUTHENTICATED is never retried: not by PS discovery, not by the master client."""
    monkeypatch.setenv("ELASTIC_PS_AUTH_TOKEN", "wrong-token")
    started = time.monotonic()
    with pytest.raises(auth.CredentialsRefused) as err:
        PSClient(cluster.master.address, tls_ca=cluster.tls.ca)
    assert time.monotonic() - started < 2
    assert "ELASTIC_PS_AUTH_TOKEN" in err.value.message and "wrong-token" not in str(err.value)
    assert err.value.reason == Reason.UNAUTHENTICATED
    started = time.monotonic()
    with pytest.raises(auth.CredentialsRefused) as err:
        ElasticDataset(list(range(8)), master=cluster.master.address, name="never",
                       shard_size=4, tls_ca=cluster.tls.ca, auth_token="wrong-token",
                       handle_sigterm=False)
    assert time.monotonic() - started < 2 and "auth_token=" in err.value.message


def test_a_ps_with_a_wrong_token_exits_1_naming_its_token_file(cluster, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("wrong-token\n")
    ps = cluster.launcher.ps(cluster.master.address, "--tls-cert", cluster.tls.cert,
                             "--tls-key", cluster.tls.key, "--tls-ca", cluster.tls.ca,
                             "--auth-token-file", str(wrong), index=0,
                             checkpoint_dir="wrong-token-ckpt")
    assert ps.wait(20) == 1, ps.output(tail=2000)
    assert f"--auth-token-file {wrong}" in ps.output() and "not retried" in ps.output()


def test_a_plaintext_client_against_tls_is_told_to_set_the_ca(cluster):
    out = cluster.launcher.run("-m", "master.ctl", "--master", cluster.master.address,
                               "--auth-token-file", cluster.token_file, "status")
    assert out.returncode == 1
    assert "serves TLS" in out.stderr and "--tls-ca" in out.stderr
    assert "ELASTIC_PS_TLS_CA" in out.stderr
    started = time.monotonic()
    with pytest.raises(ServiceError) as err:  # the SDK: at once, not after its retry budget
        ElasticDataset(list(range(8)), master=cluster.master.address, name="never",
                       shard_size=4, tls_ca="", auth_token=TOKEN, handle_sigterm=False)
    assert time.monotonic() - started < 5
    assert err.value.reason == Reason.TLS_MISMATCH and "ELASTIC_PS_TLS_CA" in err.value.message


def test_the_token_is_never_logged(cluster):
    cluster.master.status()
    assert TOKEN not in cluster.master.output()
    assert TOKEN not in cluster.ps.output()


def test_a_small_job_trains_with_tls_and_the_token(cluster):
    """Last: a worker registers, leases every record and pushes through the PS."""
    torch.manual_seed(0)
    x, y = torch.randn(RECORDS, 4), torch.randn(RECORDS, 1)
    data = list(zip(x, y))
    model = nn.Linear(4, 1)
    client = PSClient(cluster.master.address, tls_ca=cluster.tls.ca, auth_token=TOKEN,
                      timeout_s=5, max_attempts=3)
    ds = ElasticDataset(data, master=cluster.master.address, name="secure", shard_size=16,
                        tls_ca=cluster.tls.ca, auth_token=TOKEN, handle_sigterm=False)
    try:
        client.init_parameters(model, optimizer="sgd", lr=0.1)
        before = client.data.pull()["weight"].clone()
        steps = 0
        for xb, yb in ds.batches(16):
            client.pull(model)
            nn.functional.mse_loss(model(xb), yb).backward()
            client.push(model)
            steps += 1
    finally:
        ds.close()
        client.close()
    assert steps == RECORDS // 16
    assert cluster.ps_status().pushes >= steps
    done = [d for d in cluster.master.status().datasets if d.spec.name == "secure"]
    assert done and done[0].finished and done[0].epochs[0].records_done == RECORDS
    after = PSClient(cluster.master.address, tls_ca=cluster.tls.ca, auth_token=TOKEN)
    try:
        after.attach(model)
        assert not torch.equal(after.data.pull()["weight"], before)
    finally:
        after.close()


def test_settings_lines_redact_a_token_given_as_a_flag():
    from master.settings import MasterSettings
    from ps.settings import PSSettings

    assert TOKEN not in MasterSettings(auth_token=TOKEN).describe()
    assert TOKEN not in PSSettings(auth_token=TOKEN, standalone=True).describe()


def test_a_restarted_ps_has_a_new_key_and_clients_follow_it(cluster):
    """After the job (it needs the model on the PS): SIGTERM the PS (final checkpoint), start it
    again; a client that knew the old key finds the new one through ListPS."""
    client = DataClient(master=cluster.master.address, tls_ca=cluster.tls.ca, auth_token=TOKEN,
                        timeout_s=1.0, max_attempts=30, backoff_s=0.05)
    try:
        before = {n: t.clone() for n, t in client.pull().items()}
        old_key = client.exchange._conns[0].server_key
        cluster.ps.terminate()
        cluster.ps.start()
        after = client.pull()
        assert client.exchange._conns[0].server_key != old_key
        assert auth.is_curve_key(client.exchange._conns[0].server_key)
        assert all(torch.equal(after[n], before[n]) for n in before)
    finally:
        client.close()
